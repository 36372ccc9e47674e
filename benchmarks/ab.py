"""Before/after: the same benchmark sections on two trees of berth, interleaved, each row beside its A/A noise.

    .venv/bin/python benchmarks/ab.py --base e81534a --rounds 2 --only cycle,witness
    .venv/bin/python benchmarks/ab.py --base main --rounds 3 --quick --only cycle --backends sqlite

Checks REV out into a temporary worktree (`git worktree add --detach`, removed at the end) and
runs this tree's `benchmarks/run.py` (one harness, so both sides do the same work) alternately
with REV's `src/` and this tree's `src/` first on the path (PYTHONPATH; child processes and the
`berth` console script inherit it): base, head, base, head, ... for `--rounds` rounds. The
servers are the suite's own, started by each run. Every run writes its raw results and page
under `--out`; nothing in docs/ is touched.

The rows compared are the goal rows of docs/benchmarks.md (what `_report.write` gives for each
run's results). A row's value is the first number of its figure (the ratio, rate or time the goal
reads; for a row listing several sizes, the first size). Per row:

- head ÷ base: the median of the head runs' values over the median of the base runs';
- A/A spread: the ratios between runs of the same tree (every base run over every other base run,
  and likewise for head), lowest to highest: what the machine's noise alone moves a row by;
- verdict, from the goal's direction (≥: higher is better; ≤: lower is better): *worse than noise*
  when head ÷ base lies beyond the A/A spread on the bad side, *better than noise* beyond it on
  the good side, else *within noise*; a goal met on base and not met on head is always flagged.
  Rows with no goal (no direction) are shown without a verdict.

Needs `--rounds` ≥ 2 (one run per tree has no A/A spread). On a loaded machine the spread is wide
and little is judged worse; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import permutations
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _report  # noqa: E402

Rows = dict[str, tuple[str, bool | None]]  # one run's goal rows: {goal: (figure, met)}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def headline(figure: str) -> float | None:
    """The first number of a goal row's figure ("0.95× (0.77–1.14); ..." -> 0.95)."""
    m = NUMBER.search(figure)
    return float(m.group().replace(",", "")) if m else None


def direction(goal: str) -> int:
    """+1 if a higher figure is better (≥ in the goal), -1 if lower is (≤, within, over), 0 if unknown."""
    if "≥" in goal or "faster than" in goal:
        return 1
    if "≤" in goal or "within" in goal or " over " in goal:
        return -1
    return 0


def goal_rows(res: dict[str, Any], scratch: Path) -> Rows:
    """{goal: (figure, met)} of one run's results, as docs/benchmarks.md's goals table would show them."""
    goals = _report.write(res, scratch / "page.md", None)
    return {goal: (figure, ok) for goal, figure, ok in goals.rows}


def compare(base: list[Rows], head: list[Rows]) -> list[dict[str, Any]]:
    """One verdict per goal row seen in any run (rows of one side only are reported as missing there)."""
    names = list(dict.fromkeys([g for run in base + head for g in run]))
    out = []
    for goal in names:
        b = [v for run in base if goal in run and (v := headline(run[goal][0])) is not None]
        h = [v for run in head if goal in run and (v := headline(run[goal][0])) is not None]
        row: dict[str, Any] = {"goal": goal, "base": b, "head": h, "direction": direction(goal)}
        if not b or not h or statistics.median(b) == 0:
            row["verdict"] = "not comparable: " + ("no base figure" if not b else "no head figure" if not h else "zero")
            out.append(row)
            continue
        ratio = statistics.median(h) / statistics.median(b)
        same = [x / y for side in (b, h) for x, y in permutations(side, 2) if y]
        lo, hi = (min(same), max(same)) if same else (1.0, 1.0)
        met_b = [run[goal][1] for run in base if goal in run]
        met_h = [run[goal][1] for run in head if goal in run]
        row.update(ratio=ratio, aa=(lo, hi))
        sign = row["direction"]
        if any(m is True for m in met_b) and all(m is False for m in met_h):
            verdict = "WORSE: goal met on base, not on head"
        elif sign == 0:
            verdict = "no goal direction"
        elif (sign > 0 and ratio < lo) or (sign < 0 and ratio > hi):
            verdict = "WORSE than noise"
        elif (sign > 0 and ratio > hi) or (sign < 0 and ratio < lo):
            verdict = "better than noise"
        else:
            verdict = "within noise"
        row["verdict"] = verdict
        out.append(row)
    return out


def table(rows: list[dict[str, Any]], base: str, head: str) -> str:
    lines = [
        f"| goal row | base {base} | head {head} | head ÷ base | A/A spread | verdict |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    for r in rows:
        values = [", ".join(f"{v:g}" for v in r[side]) for side in ("base", "head")]
        ratio = f"{r['ratio']:.3f}" if "ratio" in r else ""
        aa = f"{r['aa'][0]:.3f}–{r['aa'][1]:.3f}" if "aa" in r else ""
        lines.append(f"| {r['goal']} | {values[0]} | {values[1]} | {ratio} | {aa} | {r['verdict']} |")
    return "\n".join(lines)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def run_side(src: Path, args: argparse.Namespace, out: Path, name: str) -> dict[str, Any] | None:
    """One benchmarks/run.py with `src` first on the path; its results, or None if it failed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    where = subprocess.run(
        [sys.executable, "-c", "import berth; print(berth.__file__)"], env=env, capture_output=True, text=True
    )
    if not where.stdout.strip().startswith(str(src)):
        raise SystemExit(f"berth imports from {where.stdout.strip() or where.stderr.strip()!r}, not {src}")
    cmd = [sys.executable, str(HERE / "run.py"), "--only", args.only, "--backends", args.backends]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--trials", str(args.trials)] if args.trials else []
    results = out / f"{name}.json"
    cmd += ["--results", str(results), "--doc", str(out / f"{name}.md"), "--chart", ""]
    print(f"[{time.strftime('%H:%M:%S')}] {name}: berth from {src}", flush=True)
    with (out / f"{name}.log").open("w") as log:
        done = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or not results.exists():
        print(f"  failed (exit {done.returncode}): see {out / f'{name}.log'}", flush=True)
        return None
    saved: dict[str, Any] = json.loads(results.read_text())
    return saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the commit (or branch) to compare this tree with")
    ap.add_argument("--rounds", type=int, default=2, help="runs per tree, alternating base/head (at least 2)")
    ap.add_argument("--quick", action="store_true", help="run.py --quick")
    ap.add_argument("--only", default="cycle", help="run.py --only (default: cycle)")
    ap.add_argument("--backends", default="file,sqlite,postgres,redis", help="run.py --backends")
    ap.add_argument("--trials", type=int, default=None, help="run.py --trials")
    ap.add_argument("--out", default=None, help="where runs and the verdict go (default bench-results/ab-<time>)")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2: the A/A spread needs two runs of each tree")
    base_rev = _git("rev-parse", "--short", f"{args.base}^{{commit}}")
    head_rev = _git("rev-parse", "--short", "HEAD") + ("+dirty" if _git("status", "--porcelain", "--", "src") else "")
    out = Path(args.out or ROOT / "bench-results" / f"ab-{time.strftime('%Y%m%dT%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="berth-ab-", dir="/var/tmp")) / "base"
    _git("worktree", "add", "--detach", str(tree), base_rev)
    runs: dict[str, list[Rows]] = {"base": [], "head": []}
    skipped: list[str] = []
    try:
        for i in range(args.rounds):
            for side, src in (("base", tree / "src"), ("head", ROOT / "src")):
                res = run_side(src, args, out, f"{side}-{i + 1}")
                for what, why in (res or {}).get("skipped", {}).items():
                    skipped.append(f"- {side}-{i + 1}: {what} not measured: {why}")
                if res is not None:
                    scratch = out / f"{side}-{i + 1}-rows"
                    scratch.mkdir(exist_ok=True)
                    runs[side].append(goal_rows(res, scratch))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(tree.parent, ignore_errors=True)
    rows = compare(runs["base"], runs["head"])
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    text = "\n".join(
        [
            f"# benchmarks/ab.py: base {base_rev} vs head {head_rev}",
            "",
            f"`{' '.join(['benchmarks/ab.py', *(argv if argv is not None else sys.argv[1:])])}`: "
            f"{len(runs['base'])} base and {len(runs['head'])} head runs, alternating; load average at the end {load}.",
            "",
            "A row's value is the first number of its goal figure. head ÷ base: median of the head runs over the "
            "median of the base runs. A/A spread: every ratio between two runs of the same tree (base with base, "
            "head with head), lowest to highest: the machine's noise. Worse than noise: head ÷ base beyond the "
            "spread on the goal's bad side (≥ goals: below it; ≤ goals: above it), or a goal met on a "
            "base run and on no head run.",
            "",
            table(rows, base_rev, head_rev),
            "",
            *skipped,
        ]
    )
    (out / "ab.md").write_text(text)
    (out / "ab.json").write_text(json.dumps({"base": base_rev, "head": head_rev, "rows": rows}, indent=1) + "\n")
    print(text)
    print(f"written to {out}/ab.md", flush=True)
    return 1 if any(r["verdict"].startswith("WORSE") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
