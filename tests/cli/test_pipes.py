"""Tables in pipes and short ids on a terminal (issue 34): piped, a table is one tab-separated line
per row, never folded; on a terminal a question id shows as its shortest unique prefix (at least 8
characters), and `--question` takes such a prefix, refusing an unknown one by name."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import berth
from berth._cli._output import SHORT_ID, short_ids
from tests.test_cli import fails, ok, park, run


def test_a_piped_ls_is_one_tab_separated_line_per_row_however_narrow_the_terminal(store: berth.Store) -> None:
    long_key = "org/" + "x" * 150
    park(store, long_key, deadline=timedelta(hours=1))
    park(store, "short")
    lines = ok("ls", env={"COLUMNS": "40"}).stdout.splitlines()
    assert lines[0].split("\t") == ["KEY", "RUN ID", "AGE", "DEADLINE", "SIZE", "SEALED BY", "LABELS"]
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[0] for r in rows] == [long_key, "short"] and all(len(r) == 7 for r in rows)
    assert rows[0][3] == "in 59m" and rows[1][6] == "team=infra"
    assert json.loads(ok("ls", "--json").stdout)[0]["key"] == long_key  # --json unchanged


def test_piped_questions_and_show_are_a_line_per_row_with_whole_ids(
    store: berth.Store, questions: berth.QuestionStore
) -> None:
    coordinator = berth.Coordinator(store, questions)
    prompt = "Push the fix for the flaky test to main, after the release branch is cut? " * 3
    coordinator.suspend("org/repo#1", berth.Envelope(provider_state=b"{}", run_id="r1"), question=prompt)
    q = questions.pending("org/repo#1")
    assert q is not None
    lines = ok("questions", env={"COLUMNS": "60"}).stdout.splitlines()
    assert lines[0].split("\t") == ["KEY", "QUESTION ID", "ASKED", "DEADLINE", "STATUS", "QUESTION"]
    assert len(lines) == 2
    key, qid, _, deadline, status, shown = lines[1].split("\t")
    assert (key, qid, status, shown) == ("org/repo#1", q.id, "waiting", prompt) and deadline.startswith("in 13d")
    fields = dict(line.split("\t") for line in ok("show", "org/repo#1").stdout.splitlines()[:3])
    assert fields == {"key": "org/repo#1", "run id": "r1", "provider": "-"}


def test_on_a_terminal_question_ids_are_their_shortest_unique_prefix(
    store: berth.Store, questions: berth.QuestionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = berth.Coordinator(store, questions)
    for i in range(3):
        coordinator.suspend(f"k{i}", berth.Envelope(provider_state=b"{}", run_id=f"r{i}"), question=f"Q{i}?")
    monkeypatch.setattr("berth._cli._question_cmds.stdout_is_terminal", lambda: True)
    table = ok("questions", env={"COLUMNS": "100"}).stdout
    for i in range(3):
        q = questions.pending(f"k{i}")
        assert q is not None and q.id[:SHORT_ID] in table and q.id not in table
    assert len(table.splitlines()) == 2 + 3  # header, rule, a line per question: nothing folds at 100 columns


def test_short_ids_grow_until_unique() -> None:
    ids = ["abcdef0123", "abcdef0199", "ffff00001111"]
    assert short_ids(ids) == {"abcdef0123": "abcdef012", "abcdef0199": "abcdef019", "ffff00001111": "ffff0000"}
    assert short_ids(["a" * 32]) == {"a" * 32: "a" * SHORT_ID}


def test_answer_takes_a_unique_prefix_and_names_an_unknown_one(
    store: berth.Store, questions: berth.QuestionStore, home: Path
) -> None:
    berth.Coordinator(store, questions).suspend("k", berth.Envelope(provider_state=b"{}"), question="Go?")
    q = questions.pending("k")
    assert q is not None
    other = ("0" if q.id[0] != "0" else "1") + q.id[1:SHORT_ID]
    line = fails(1, "answer", "k", "yes", "--question", other, says=[repr(other), "identity 'pr-bot', key 'k'"])
    assert "superseded" not in line and q.id[:SHORT_ID] in line
    line = fails(2, "answer", "k", "yes", "--question", q.id[:4], says=[repr(q.id[:4]), "at least 8"])
    assert "superseded" not in line
    done = ok("answer", "k", "yes", "--question", q.id[:SHORT_ID], "--json")
    assert json.loads(done.stdout)["question_id"] == q.id
    answer = questions.answer("k")
    assert answer is not None and answer.question_id == q.id and answer.text == "yes"


def _failing_after(monkeypatch: pytest.MonkeyPatch, rows: int, error: BaseException) -> Any:
    """The real SQLite listing, with a fault injected once `rows` rows came through; the real one."""
    from berth.backends.sqlite import SqliteBackend

    real = SqliteBackend.sorted_heads

    def sorted_heads(self: SqliteBackend, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for n, row in enumerate(real(self, *args, **kwargs)):
            if n == rows:
                raise error
            yield row

    monkeypatch.setattr(SqliteBackend, "sorted_heads", sorted_heads)
    return real


@pytest.mark.parametrize(
    ("error", "code", "outcome"),
    [(sqlite3.OperationalError("disk I/O error"), 1, "refused"), (KeyboardInterrupt(), 130, "aborted")],
    ids=["backend-fails", "ctrl-c"],
)
def test_ls_json_failing_midway_is_still_one_json_document(
    store: berth.Store, monkeypatch: pytest.MonkeyPatch, error: BaseException, code: int, outcome: str
) -> None:
    for n in range(5):
        park(store, f"k{n}")
    real = _failing_after(monkeypatch, 3, error)
    result = run("ls", "--json")
    assert result.exit_code == code
    doc = json.loads(result.stdout)  # one valid document: the array, the failure its last element
    assert [item["key"] for item in doc[:-1]] == ["k0", "k1", "k2"]
    assert doc[-1]["ok"] is False and doc[-1]["error"] == outcome and doc[-1]["exit_code"] == code
    lines = run("ls", "--jsonl").stdout.splitlines()  # streamed a line at a time, the failure the last line
    assert [json.loads(line).get("key") for line in lines[:-1]] == ["k0", "k1", "k2"]
    assert json.loads(lines[-1])["error"] == outcome
    from berth.backends.sqlite import SqliteBackend

    monkeypatch.setattr(SqliteBackend, "sorted_heads", real)
    assert [item["key"] for item in json.loads(ok("ls", "--json").stdout)] == [f"k{n}" for n in range(5)]


def test_ls_json_failing_before_its_first_element_is_the_failure_object(
    store: berth.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    park(store, "k0")
    _failing_after(monkeypatch, 0, sqlite3.OperationalError("disk I/O error"))
    doc = json.loads(run("ls", "--json").stdout)
    assert doc["ok"] is False and doc["error"] == "refused"
