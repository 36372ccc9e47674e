"""The raw results beside the generated pages (issue 34.7): every row re-derivable, every cited commit real.

docs/results/reliability.json holds a record per row of docs/reliability.md's table and
docs/results/benchmarks.json the raw figures of docs/benchmarks.md. Cheap: reads two files and
asks git about a few dozen hashes (under a second).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from scripts import reliability
from scripts._commit import commit_exists, commit_with_tree

from tests._bench import bench_report
from tests.reliability._common import Result

ROOT = Path(__file__).resolve().parent.parent
RELIABILITY = ROOT / "docs" / "reliability.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"


def _table_rows() -> list[list[str]]:
    part = RELIABILITY.read_text().split(reliability.BEGIN, 1)[1].split(reliability.END, 1)[0]
    rows = []
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("scenario", "---"):
            rows.append(cells)
    return rows


def _git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    probe = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, check=False)
    return probe.returncode == 0


def test_every_row_of_the_reliability_table_has_its_raw_record() -> None:
    raw = json.loads((ROOT / "docs" / "results" / "reliability.json").read_text())
    rows = _table_rows()
    assert rows
    assert [(r[0], r[1]) for r in rows] == [(x["scenario"], x["backend"]) for x in raw["rows"]]
    for cells, record in zip(rows, raw["rows"], strict=True):
        failures = "skipped" if record["trials"] == 0 and not record["failures"] else str(record["failures"])
        figures = [f"{record['trials']:,}", failures, f"{record['seconds']:,.1f}", record["commit"]]
        assert cells[2:] == figures, (cells, record)
    assert len(raw["runs"]) == sum(line.startswith("- `") for line in RELIABILITY.read_text().splitlines())


def test_every_commit_a_reliability_row_cites_is_in_the_history() -> None:
    if not _git_checkout():
        pytest.skip("not a git checkout: the cited commits cannot be looked up")  # never in CI: it checks out
    raw = json.loads((ROOT / "docs" / "results" / "reliability.json").read_text())
    unknown = []
    for record in raw["rows"]:
        commit, tree = record["commit"], record.get("src_tree")
        if commit == reliability.UNRECORDED or commit_exists(ROOT, commit):
            continue
        if tree and commit_with_tree(ROOT, tree):
            continue  # rebased: today's history holds the same src/ under another hash
        if tree is None and record.get("lost"):
            continue  # measured before src trees were recorded, and said so in its record
        unknown.append(f"{record['scenario']} / {record['backend']}: {commit}")
    assert not unknown, unknown


def test_the_run_times_the_page_quotes_are_the_tables_sums() -> None:
    # "How to run it" tells a reader how long a full run takes from the table's own seconds; a
    # regenerated row changes them, and this keeps the sentence from going stale.
    # The sentence is the script's own (`quoted_sums`, its wording tested in test_measured_commit.py),
    # summed here over the raw records rather than the rows the page was written from.
    raw = json.loads((ROOT / "docs" / "results" / "reliability.json").read_text())
    rows = [Result(r["scenario"], r["backend"], r["trials"], r["failures"], r["seconds"]) for r in raw["rows"]]
    quoted = reliability.quoted_sums(rows)
    assert quoted.startswith("about ") and " minutes: the rows below sum to " in quoted
    assert quoted in " ".join(RELIABILITY.read_text().split()), quoted


# The last full run of docs/benchmarks.md before run.py committed its raw results: the one page
# allowed without them. A page regenerated since names another commit and needs its raw file.
GENERATED_BEFORE_RAW = "2b72e78"


def _benchmarks_raw() -> dict[str, Any] | None:
    path = ROOT / "docs" / "results" / "benchmarks.json"
    if not path.exists():
        assert f"on commit {GENERATED_BEFORE_RAW} " in BENCHMARKS.read_text(), "docs/results/benchmarks.json missing"
        return None
    saved: dict[str, Any] = json.loads(path.read_text())
    return saved


def test_the_benchmarks_page_is_derived_from_its_raw_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = _benchmarks_raw()
    if saved is None:
        return
    report = bench_report()
    monkeypatch.setattr(report, "chart", lambda res, path: None)  # matplotlib is in the bench group only
    page = BENCHMARKS.read_text().splitlines()
    assert any(f"on commit {saved['meta']['commit']} " in line for line in page)
    doc = tmp_path / "benchmarks.md"
    report.write(saved, doc, tmp_path / "chart.png")  # spliced sections give the same rows from the same data
    rows = [line for line in doc.read_text().splitlines() if line.startswith("| ")]
    missing = [line for line in rows if line not in page]
    assert rows and not missing, missing[:5]


def test_the_benchmarks_commit_is_in_the_history() -> None:
    saved = _benchmarks_raw()
    if saved is None or not _git_checkout():
        return
    commit, tree = saved["meta"]["commit"], saved["meta"].get("src_tree")
    assert commit_exists(ROOT, commit) or (tree and commit_with_tree(ROOT, tree)), (commit, tree)
