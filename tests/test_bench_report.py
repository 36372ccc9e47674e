"""benchmarks/_report.py: a goal row for every row of issue 35's table, met or not, from synthetic results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._bench import ROOT, bench_report, load

R = bench_report()


def _contender(rate: float, cpu: float) -> dict[str, Any]:
    return {"role": "x", "rates": [rate] * 3, "cpu": [cpu] * 3}


def _results() -> dict[str, Any]:
    meta = {
        "command": "python benchmarks/run.py",
        "when": "2026-12-03 23:00 UTC",
        "mode": "quick",
        "commit": "abc1234",
        "duration_s": 1.0,
        "machine": {"CPU": "test"},
        "versions": {"berthing": "0"},
    }
    cycle = {
        "sqlite": {R.BERTH: _contender(95, 120e-6), R.FLOOR: _contender(100, 100e-6)},  # 0.95× wall, 1.2× CPU
        "redis": {R.BERTH: _contender(80, 105e-6), R.FLOOR: _contender(100, 100e-6)},  # 0.8× wall, 1.05× CPU
    }
    saver_op = {
        R.BERTH: _contender(100, 1e-3),
        R.PEER_PLAIN: _contender(110, 1e-3),  # berth's time 1.1× LangGraph's: met
        R.PEER_GCM: _contender(50, 2e-3),
        R.PEER_EAX: _contender(40, 2e-3),
        "_load": 1.0,
    }
    slow_op = {**saver_op, R.PEER_PLAIN: _contender(200, 1e-3)}  # 2.0×: not met
    listing_row = {
        "list": [{"entries": 1000, "wall": 1.0, "cpu": 1.0, "peak_growth": 2**20, "load": 1.0}],
        "floor": [{"entries": 1000, "wall": 0.7, "cpu": 0.7, "peak_growth": 2**20, "load": 1.0}],  # 0.7×
        "sweep": [{"entries": 1000, "wall": 1.0, "done": 10, "peak_growth": 2**20}],
    }
    stall = {"step_cpu_max_ms": 1.0, "step_cpu_gc_max_ms": 2.0, "step_wall_max_ms": 3.0, "gc_pause_max_ms": 1.0,
             "lag_p99_ms": 1.0, "lag_max_ms": 2.0}  # fmt: skip
    return {
        "meta": meta,
        "cycle": cycle,
        "witness": {
            "sqlite": {
                "cycle": {R.BERTH: _contender(150, 1), R.WITNESSED: _contender(100, 1), R.FLOOR: _contender(160, 1)}
            }
        },
        "listing": {"file": {"1000": listing_row, "10000": listing_row}},
        "savers": {
            "sizes": [100, 10_000],
            "backends": {
                "sqlite": {
                    "sync/get_tuple/100": saver_op,
                    "sync/get_tuple/10000": slow_op,
                    "sync/list10": saver_op,
                    "sync/step": saver_op,
                }
            },
        },
        "stalls": {"sqlite": {"64KiB x300": stall, "48MiB": {**stall, "step_wall_max_ms": 40.0}, "load": 1.0}},
        "save_many": {
            "items": 10,
            "rounds": 1,
            "backends": {
                "sqlite": {"sync": {"one": [100.0], "many": [1500.0]}, "async": {"one": [100.0], "many": [500.0]}}
            },
        },
    }


@pytest.fixture(autouse=True)
def _no_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "chart", lambda res, path: None)  # matplotlib is in the bench group only


def test_every_row_of_issue_35_has_a_goal_row_met_or_not(tmp_path: Path) -> None:
    goals = R.write(_results(), tmp_path / "b.md", tmp_path / "c.png")
    got = {goal: ok for goal, _, ok in goals.rows}
    assert got["cycle SQLite: berth ≥ 0.9× floor"] is True
    assert got["cycle SQLite: berth's client CPU ≤ 1.1× floor's"] is False
    assert got["cycle Redis: berth ≥ 0.9× floor"] is False
    assert got["cycle Redis: berth's client CPU ≤ 1.1× floor's"] is True
    assert got["witness SQLite: a cycle with a witness ≤ 1.6× the time of one without"] is True
    assert got["listing file: list() ≥ 0.8× a raw scan-and-read at 10,000"] is False
    assert got["savers SQLite sync, get_tuple (latest): berth's time ≤ 1.25× LangGraph unencrypted's"] is False
    assert got["savers SQLite sync, list(limit=10): berth's time ≤ 1.25× LangGraph unencrypted's"] is True
    assert got["savers SQLite sync, graph step (put + put_writes): berth's time ≤ 1.25× LangGraph unencrypted's"]
    assert got["event-loop stall SQLite, 64 KiB × 300: worst step ≤ 10 ms"] is True
    assert got["event-loop stall SQLite, 48 MiB one at a time: worst step ≤ 10 ms"] is False
    assert got["save_many SQLite sync: ≥ 10× saves one by one"] is True
    assert got["save_many SQLite async: ≥ 10× saves one by one"] is False
    text = (tmp_path / "b.md").read_text()
    assert "| save_many SQLite async: ≥ 10× saves one by one | 5.0× (5.0–5.0) | **not met** |" in text


def test_splice_replaces_the_stall_and_save_many_rows(tmp_path: Path) -> None:
    doc = tmp_path / "b.md"
    res = _results()
    R.write(res, doc, tmp_path / "c.png")
    res["save_many"]["backends"]["sqlite"]["async"]["many"] = [2000.0]
    res["meta"]["machine"]["load average at start"] = "1.0"
    R.splice(doc, {"meta": res["meta"], "save_many": res["save_many"]})
    text = doc.read_text()
    assert "| save_many SQLite async: ≥ 10× saves one by one | 20.0× (20.0–20.0) | **met** |" in text
    assert text.count("| save_many SQLite async") == 1
    assert text.count(R.SAVE_MANY_HEADING) == 1


def _ab() -> Any:
    return load(ROOT / "benchmarks" / "ab.py", "bench_ab")


def test_ab_judges_each_row_against_the_spread_of_runs_of_the_same_tree() -> None:
    ab = _ab()
    rate, cpu, none = "cycle X: berth ≥ 0.9× floor", "cycle X: berth's client CPU ≤ 1.1× floor's", "witness X: cost"

    def run(r: float, c: float, met: bool = True) -> dict[str, tuple[str, bool | None]]:
        return {rate: (f"{r}× (0.8–1.1)", met), cpu: (f"{c}× (1,000 vs 900 µs)", True), none: ("2.0×", None)}

    base = [run(1.00, 1.00), run(1.04, 1.02)]  # A/A: 0.96-1.04 and 0.98-1.02
    rows = {r["goal"]: r for r in ab.compare(base, [run(0.90, 1.01), run(0.92, 1.00)])}
    assert rows[rate]["verdict"] == "WORSE than noise"  # a rate fell by 10%, noise is 4%
    assert rows[cpu]["verdict"] == "within noise"
    assert rows[none]["verdict"] == "no goal direction"
    rows = {r["goal"]: r for r in ab.compare(base, [run(1.01, 1.10), run(1.03, 1.12)])}
    assert rows[rate]["verdict"] == "within noise"
    assert rows[cpu]["verdict"] == "WORSE than noise"  # lower is better for a ≤ goal
    rows = {r["goal"]: r for r in ab.compare(base, [run(1.02, 1.0, met=False), run(1.02, 1.0, met=False)])}
    assert rows[rate]["verdict"] == "WORSE: goal met on base, not on head"
    assert ab.headline("1,506 claims/s") == 1506.0


def _run_py() -> Any:
    return load(ROOT / "benchmarks" / "run.py", "bench_run")


def test_a_failing_section_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    run = _run_py()
    res, partial = _results(), tmp_path / "partial.json"
    with run.section("cycle", res, res["meta"], partial):
        raise RuntimeError("the server went away")
    with run.section("witness", res, res["meta"], partial):
        pass  # the next section still runs, and its results stay
    assert "cycle" not in res and "witness" in res  # half a section is not shown as if whole
    assert res["failed"] == {"cycle": "RuntimeError: the server went away"}
    saved = json.loads(partial.read_text())  # what was measured survives the run dying later
    assert saved["failed"] == res["failed"] and saved["meta"]["partial"] is True and "witness" in saved
    R.write(saved, tmp_path / "b.md", None)
    assert "- `cycle`: RuntimeError: the server went away" in (tmp_path / "b.md").read_text()


def test_the_page_of_a_run_is_the_page_its_raw_file_gives(tmp_path: Path) -> None:
    run = _run_py()
    res = _results()
    res["cycle"]["sqlite"][R.BERTH]["rates"] = [1234567.4] * 3  # shown to 7 digits, kept to 6
    res["cycle"]["sqlite"][R.BERTH]["cpu"] = [120.00049e-6] * 3
    raw, page = tmp_path / "raw.json", tmp_path / "run.md"
    run.publish(res, raw, page, None, splice=False)
    run._report.write(run.load_raw(raw), tmp_path / "derived.md", None)  # what --from-json does
    assert page.read_text() == (tmp_path / "derived.md").read_text()
