"""The store's hot path in CPU time per call, optionally against another source tree, interleaved.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_hotpath.py [--against /work/base/src] [--rounds 5]

Rows: `save`, `load`, `claim` and a `cycle` (save + claim) of an AES-GCM sealed store on the
memory backend and on an SQLite file, with a 1 KiB and a 64 KiB state, and the codec alone
(`seal_frame`, `open_frame`, called through `store.core`). Each figure is `time.process_time` over a hot loop divided by
its calls (µs), so other processes on the machine cost it little; a claim is timed over
batches of 200 keys saved untimed just before (the same keys each batch, as a host's).

Each round runs every row once in a fresh subprocess per tree (`PYTHONPATH=<tree>`, the same
interpreter), the trees alternating within a round (`ours` first in even rounds, the other in
odd ones), so drift of the machine falls on both alike. Reported: each tree's median and
min-max over the rounds, and the ratio of medians. A row is "within noise" when our median
lies inside the other tree's min-max (or below it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
OURS = str(HERE.parents[1] / "src")
KEY = bytes(range(32))
BATCH = 200
SIZES = {"1k": 1024, "64k": 64 * 1024}


def _state(size: int) -> list[dict[str, Any]]:
    """A chat-like JSON state of about `size` bytes."""
    turn = {"role": "user", "content": "x" * 200}
    return [dict(turn, n=i) for i in range(max(1, size // 220))]


def _per_call(calls: int, fn: Callable[[], object]) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def _store_rows(store: Any, env: Any, n: int) -> dict[str, float]:
    """save, load, claim and a cycle of `env` on `store`, `n` calls each."""
    keys = [f"org/repo#{i}" for i in range(BATCH)]
    key = keys[0]
    store.save(key, env)
    _per_call(n // 10, lambda: store.save(key, env))  # warm up
    rows = {"save": _per_call(n, lambda: store.save(key, env)), "load": _per_call(n, lambda: store.load(key))}
    spent, claimed = 0.0, 0
    while claimed < n:
        for k in keys:
            store.save(k, env)
        start = time.process_time()
        for k in keys:
            store.claim(k)
        spent += time.process_time() - start
        claimed += BATCH
    rows["claim"] = spent / claimed * 1e6

    def cycle() -> None:
        store.save(key, env)
        assert store.claim(key) is not None

    rows["cycle"] = _per_call(n, cycle)
    return rows


def _codec_rows(core: Any, env: Any, n: int) -> dict[str, float]:
    """The frame codec through the store's core (`store.core`: benchmarks import nothing private):
    `seal` is `seal_frame` and `open` is `open_frame` with the store's sealer choice, `n` calls each."""
    created = datetime(2026, 1, 1, tzinfo=timezone.utc)
    frame = core.seal("org/repo#1", env, created)
    return {
        "seal_frame": _per_call(n, lambda: core.seal("org/repo#1", env, created)),
        "open_frame": _per_call(n, lambda: core.open("org/repo#1", frame)),
    }


def _worker(cycles: int) -> dict[str, Any]:
    """One round of every row in this process, against whichever `berth` PYTHONPATH gives."""
    import berth

    sealer = berth.AesGcmSealer(berth.Keyring({"bench-1": KEY}, "bench-1"))
    envs = {
        label: berth.Envelope(provider_state=_state(size), provider="anthropic", model="m", run_id="r")
        for label, size in SIZES.items()
    }
    calls = {label: cycles // (8 if size > 4096 else 1) for label, size in SIZES.items()}
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend, url, scale in (("memory", "memory://", 1), ("sqlite", f"sqlite:///{tmp}/bench.db", 40)):
            store = berth.open_store(url, identity="bench", sealer=sealer)
            for label in SIZES:
                for op, value in _store_rows(store, envs[label], max(BATCH, calls[label] // scale)).items():
                    rows[f"{backend} {label} {op}"] = value
            store.close()
    core = berth.open_store("memory://", identity="bench", sealer=sealer).core
    for label in SIZES:
        for op, value in _codec_rows(core, envs[label], calls[label]).items():
            rows[f"codec {label} {op}"] = value
    return {"berth": berth.__file__, "rows": rows}


def _round(tree: str, cycles: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, str(HERE), "--worker", "--cycles", str(cycles)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    if not result["berth"].startswith(tree):
        raise SystemExit(f"PYTHONPATH={tree} imported berth from {result['berth']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="another tree's src directory (e.g. /work/base/src)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=20000, help="calls per 1 KiB memory row (SQLite: a 40th)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.cycles)))
        return
    trees = {"ours": OURS} | ({"base": str(Path(args.against).resolve())} if args.against else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name].append(_round(trees[name], args.cycles)["rows"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"µs CPU per call, median [min-max] of {args.rounds} rounds; ours = {OURS}")
    header = f"{'row':<24}" + "".join(f"{name + ' (' + trees[name] + ')':>30}" for name in trees)
    print(header + ("   ratio  verdict" if len(trees) == 2 else ""))
    for row in runs["ours"][0]:
        line = f"{row:<24}"
        stats = {}
        for name in trees:
            values = [run[row] for run in runs[name]]
            stats[name] = (statistics.median(values), min(values), max(values))
            med, lo, hi = stats[name]
            line += f"{f'{med:8.2f} [{lo:.2f}-{hi:.2f}]':>30}"
        if "base" in stats:
            ours, base = stats["ours"][0], stats["base"]
            verdict = "ok" if ours <= base[2] else "WORSE"
            line += f"   {ours / base[0]:5.3f}  {verdict}"
        print(line)


if __name__ == "__main__":
    main()
