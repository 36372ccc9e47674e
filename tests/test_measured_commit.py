"""docs/reliability.md and docs/benchmarks.md name the commit they measured (issue 21.13)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from scripts import reliability
from scripts._commit import commit_exists, commit_with_tree, measured_commit, src_tree

from tests._bench import bench_report

ROOT = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is not installed: the pages name the commit they measured through it", pytrace=False)
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "docs" / "page.md").write_text("table\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one")
    return repo


def test_a_clean_tree_is_its_short_hash(repo: Path) -> None:
    short = _git(repo, "rev-parse", "--short", "HEAD")
    assert re.fullmatch(r"[0-9a-f]{7,}", short)
    assert measured_commit(repo) == short


def test_a_changed_or_new_file_makes_it_dirty(repo: Path) -> None:
    short = _git(repo, "rev-parse", "--short", "HEAD")
    (repo / "code.py").write_text("x = 2\n")
    assert measured_commit(repo) == f"{short}+dirty"
    _git(repo, "checkout", "-q", "code.py")
    (repo / "new.py").write_text("")
    assert measured_commit(repo) == f"{short}+dirty"


def test_the_page_being_regenerated_does_not_make_it_dirty(repo: Path) -> None:
    short = _git(repo, "rev-parse", "--short", "HEAD")
    (repo / "docs" / "page.md").write_text("table, half regenerated\n")
    assert measured_commit(repo, generated=["docs/page.md"]) == short
    assert measured_commit(repo) == f"{short}+dirty"


def test_outside_git_it_is_unknown(tmp_path: Path) -> None:
    assert measured_commit(tmp_path) == "unknown"


def _run_reliability(argv: list[str], doc: Path, commit: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(reliability, "DOC", doc)
    monkeypatch.setattr(reliability, "measured_commit", lambda root, generated=(): commit)
    try:
        assert reliability.main(argv) == 0
    finally:
        logging.disable(logging.NOTSET)  # main() quiets the pool's reconnect chatter for its run
    return doc.read_text()


def test_the_reliability_page_names_the_commit_of_its_run_and_of_each_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# Reliability\n\n{reliability.BEGIN}\n{reliability.END}\n")
    text = _run_reliability(["--quick", "--only", "tamper"], doc, "abc1234", monkeypatch)
    run_lines = [line for line in text.splitlines() if line.startswith("- `")]
    assert len(run_lines) == 1 and run_lines[0].endswith("commit abc1234.")
    rows = [line for line in text.splitlines() if line.startswith("| tamper")]
    assert rows and all(line.endswith("| abc1234 |") for line in rows), rows

    # a later --merge of other rows keeps each earlier row's commit and stamps its own on the new rows
    text = _run_reliability(
        ["--quick", "--merge", "--only", "leaks", "--backends", "file"], doc, "def5678+dirty", monkeypatch
    )
    assert [line for line in text.splitlines() if line.startswith("| tamper")] == rows
    leaks = [line for line in text.splitlines() if line.startswith("| leaks")]
    assert len(leaks) == 1 and leaks[0].endswith("| def5678+dirty |")
    assert [line[-len("commit def5678+dirty.") :] for line in text.splitlines() if line.startswith("- `")][1:] == [
        "commit def5678+dirty."
    ]

    # the raw records beside the page: one per row, in the table's order, each with its own commit and src/ tree
    raw = json.loads((tmp_path / "results" / "reliability.json").read_text())
    assert [(x["scenario"].split(":")[0], x["commit"]) for x in raw["rows"]] == [
        *(("tamper", "abc1234") for _ in rows),
        ("leaks", "def5678+dirty"),
    ]
    assert all(x["src_tree"] == src_tree(ROOT) for x in raw["rows"])
    assert [run["commit"] for run in raw["runs"]] == ["abc1234", "def5678+dirty"]


def test_a_rebased_commit_is_found_again_by_its_src_tree(repo: Path) -> None:
    (repo / "src").mkdir()
    (repo / "src" / "m.py").write_text("x = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "code")
    measured, tree = measured_commit(repo), src_tree(repo)
    assert re.fullmatch(r"[0-9a-f]{40}", tree)
    (repo / "docs" / "page.md").write_text("other\n")  # a rebase rewrites the hash, not src/
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-q", "--amend", "-m", "code'")
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    _git(repo, "gc", "-q", "--prune=now")
    assert not commit_exists(repo, measured)
    assert commit_with_tree(repo, tree) == _git(repo, "rev-parse", "--short=7", "HEAD")
    assert commit_with_tree(repo, tree + "+dirty") is None
    (repo / "src" / "m.py").write_text("x = 2\n")
    assert src_tree(repo) == f"{tree}+dirty"


def test_a_reliability_row_from_before_commits_were_recorded_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "reliability.md"
    old = "| crash: SIGKILL mid save/load/claim | file | 250 | 0 | 12.9 |"
    header = "| scenario | backend | trials | failures | seconds |"
    doc.write_text(f"# Reliability\n\n{reliability.BEGIN}\n{header}\n{old}\n{reliability.END}\n")
    text = _run_reliability(
        ["--quick", "--merge", "--only", "tamper", "--backends", "file"], doc, "abc1234", monkeypatch
    )
    assert f"{old} {reliability.UNRECORDED} |" in text.splitlines()


def test_the_reliability_page_quotes_the_sums_of_its_regenerated_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "reliability.md"
    stale = (
        "about 167 minutes: the rows below sum to 9,999 s, the races (with and without a witness) 9,000 s of it"
        " and the cancellation trial 900 s"
    )
    table = [
        "| scenario | backend | trials | failures | seconds | commit |",
        "| races: claimers x re-saver x sweeper | s3 | 10,000 | 0 | 1,000.4 | abc1234 |",
        "| cancel: every await point of claim, wake and the integrations' wakes | file | 2,376 | 0 | 250.4 | abc1234 |",
    ]
    doc.write_text(
        "\n".join(["# Reliability", "", f"| a | {stale}, so |", "", reliability.BEGIN, *table, reliability.END])
    )
    text = _run_reliability(["--quick", "--merge", "--only", "tamper"], doc, "abc1234", monkeypatch)
    rows = json.loads((tmp_path / "results" / "reliability.json").read_text())["rows"]
    tamper = sum(x["seconds"] for x in rows if x["scenario"].startswith("tamper"))
    assert stale not in text
    total = f"{round(1_000.4 + 250.4 + tamper):,} s"
    minutes = f"about {round((1_000.4 + 250.4 + tamper) / 60)} minutes"
    assert f"{minutes}: the rows below sum to {total}, the races (with and without a witness) 1,000 s of it" in text
    assert "of it and the cancellation trial 250 s, so |" in text


def test_the_benchmarks_page_names_the_commit_it_measured(tmp_path: Path) -> None:
    meta: dict[str, Any] = {
        "command": "python benchmarks/run.py --only counts",
        "when": "2026-12-01 02:00 UTC",
        "mode": "quick",
        "commit": "abc1234+dirty",
        "duration_s": 12.0,
        "machine": {"CPU": "test"},
        "versions": {"berth": "0"},
    }
    doc = tmp_path / "benchmarks.md"
    bench_report().write({"meta": meta}, doc, tmp_path / "chart.png")
    assert "Run 2026-12-01 02:00 UTC on commit abc1234+dirty (quick mode, 12 s)." in doc.read_text().splitlines()
    # results saved before runs recorded their commit say so rather than naming none
    del meta["commit"]
    bench_report().write({"meta": meta}, doc, tmp_path / "chart.png")
    assert "Run 2026-12-01 02:00 UTC on commit unrecorded (quick mode, 12 s)." in doc.read_text().splitlines()


def test_remap_points_a_rebased_row_at_the_commit_holding_its_src_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = _git(ROOT, "rev-parse", "HEAD:src")
    now = commit_with_tree(ROOT, tree)
    assert now is not None
    doc = tmp_path / "reliability.md"
    header = "| scenario | backend | trials | failures | seconds | commit |\n| --- | --- | ---: | ---: | ---: | --- |"
    rows = "| tamper | file | 10 | 0 | 1.0 | 0000000 |\n| leaks | file | 10 | 0 | 1.0 | 1111111 |"
    doc.write_text(f"# Reliability\n\n{reliability.BEGIN}\n- `run`.\n\n{header}\n{rows}\n{reliability.END}\n")
    monkeypatch.setattr(reliability, "DOC", doc)
    record = {"trials": 10, "failures": 0, "seconds": 1.0, "notes": []}
    raw = {
        "runs": [{"line": "`run`."}],
        "rows": [
            {"scenario": "tamper", "backend": "file", "commit": "0000000", "src_tree": tree, **record},
            {"scenario": "leaks", "backend": "file", "commit": "1111111", "src_tree": "0" * 40, **record},
        ],
    }
    reliability.raw_path().parent.mkdir()
    reliability.raw_path().write_text(json.dumps(raw))
    assert reliability.remap() == 1  # the second row's tree is in no commit: it stays, and is counted
    assert f"| tamper | file | 10 | 0 | 1.0 | {now} |" in doc.read_text().splitlines()
    assert "| leaks | file | 10 | 0 | 1.0 | 1111111 |" in doc.read_text().splitlines()
    saved = json.loads(reliability.raw_path().read_text())
    assert saved["rows"][0]["commit"] == now and saved["rows"][0]["rebased_from"] == "0000000"
