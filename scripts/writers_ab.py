"""SQLite writers, turn against turn: `python scripts/writers_ab.py [--writers 8] [--seconds 2] [--rounds 6]`.

The benchmark's writers workload (benchmarks/_contention.py: P processes park, load and delete
64 KiB on keys of their own, on one store) run round by round for the floor (SQLite's busy
handler), berth as it is (`queue`: the kernel's flock queue, waited for in a helper thread), the
same queue waited for in the writer's own thread with no timeout (`block`), and the turn berth had
before (`poll`: `LOCK_NB` every 0.25-0.75 ms). The order rotates each round; the ratio to the floor
is taken within a round. Here, not in benchmarks/, because it swaps berth's private `_Turn`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

VARIANTS = ("floor", "queue", "block", "poll")


class _Block:
    """The kernel's queue waited for in the writer's own thread: one wake-up per hand-off, no timeout."""

    __slots__ = ("fd", "timeout")

    def __init__(self, fd: int, timeout: float):
        self.fd, self.timeout = fd, timeout

    def __enter__(self) -> None:
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)


class _Poll(_Block):
    """The turn before the queue: `LOCK_NB`, then a retry every 0.25-0.75 ms until `timeout`."""

    __slots__ = ()
    _jitter = random.Random().random

    def __enter__(self) -> None:
        import fcntl

        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
            time.sleep(0.0005 * (0.5 + self._jitter()))


def worker(variant: str, args: dict[str, Any]) -> None:
    """In a writer process: swap the turn for `variant`'s, then run the benchmark's writer job."""
    from _contention import writer_job

    from berth.backends import sqlite

    if variant in ("block", "poll"):
        sqlite._Turn = _Block if variant == "block" else _Poll  # type: ignore[misc, assignment]
    sys.stdout.write("RESULT " + json.dumps(writer_job(args)) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    import _contention

    variants = args.variants.split(",")
    here = tempfile.mkdtemp(prefix="writers-ab-")
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        for variant in variants[round_ % len(variants) :] + variants[: round_ % len(variants)]:
            where = f"{here}/{variant}-{round_}.db"
            conn = sqlite3.connect(where, timeout=30)  # made once: 8 first connections can collide on WAL mode
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()

            def at(backend: str, ctx: dict[str, Any], role: str, trial: int, w: str = where) -> str:
                return w

            def command(job: str, args: dict[str, Any], v: str = variant) -> list[str]:
                return [sys.executable, __file__, "--worker", v, json.dumps(args)]

            _contention._where = at
            _contention.worker_command = command
            role = "floor" if variant == "floor" else "berth"
            res = _contention.writers("sqlite", {"dir": here}, role, round_, args.writers, args.seconds)
            rows[variant].append(res)
            print(
                f"round {round_} {variant:6s} {res['cycles_per_s']:6.0f}/s p50 {res['p50_ms']:5.1f} "
                f"p99 {res['p99_ms']:6.1f} ms slowest {res['slowest_writer_share']:.2f} "
                f"CPU {res['cpu_us_per_cycle']:5.0f} µs/cycle load {res['load']:.1f}",
                flush=True,
            )
    for variant in variants:
        got = rows[variant]
        line = f"{variant:6s} {statistics.median(r['cycles_per_s'] for r in got):6.0f}/s"
        if "floor" in rows and variant != "floor":
            ratios = [a["cycles_per_s"] / b["cycles_per_s"] for a, b in zip(got, rows["floor"], strict=True)]
            line += f" {statistics.median(ratios):.2f}× floor ({min(ratios):.2f}-{max(ratios):.2f})"
        line += f" p99 {statistics.median(r['p99_ms'] for r in got):.1f} ms"
        line += f" CPU {statistics.median(r['cpu_us_per_cycle'] for r in got):.0f} µs/cycle"
        print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()
