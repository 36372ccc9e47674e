"""The 64 KiB park/wake cycle counted in CPU instructions: berth beside its raw-client floor, under valgrind.

    python benchmarks/bench_instructions.py                      # SQLite, files, Redis; 40 cycles
    python benchmarks/bench_instructions.py --backends sqlite --cycles 100 --jobs 2

Each contender (berth sealed, the floor of `_floors.py`) runs in a fresh interpreter under
`valgrind --tool=callgrind` with `PYTHONHASHSEED=0`: once with N cycles and once with none, both
after the same warm-up. The difference over N is the client's instructions per cycle, a figure
that does not move with the load of the machine as CPU time does (the servers' own work, Redis's
or the kernel's, is not counted: only this process's user-space instructions). The cycle is
`_cycle.py`'s: build the envelope, save, load, decode the state, delete with the token; the floor's
is orjson, AES-256-GCM and the same durable statements by hand.

Each count is the least of `--repeat` runs: the same run repeats to within a few hundred
instructions, but where a reply arrives in pieces (Redis) a buffer may grow by a `realloc` that
moves it, ~100k instructions a cycle that are the heap's luck, not the code's. Bytecode is compiled
by a run outside valgrind first, so neither counted run compiles any. `--keep DIR` keeps the
callgrind files, for `callgrind_annotate DIR/berth-sqlite-40.out`.
Redis is `$BERTH_TEST_REDIS` (default redis://127.0.0.1:6379/0), or `--redis URL`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP = 10  # cycles before counting starts matters not (it is subtracted), but warm caches and statements
BACKENDS = ("sqlite", "file", "redis")
CONTENDERS = ("berth", "floor")


def child(contender: str, backend: str, cycles: int, workdir: str, redis_url: str) -> None:
    """Run WARMUP + `cycles` cycles of one contender (the process valgrind counts)."""
    sys.path.insert(0, str(HERE))
    warnings.simplefilter("ignore")  # e.g. Redis's durability warning: figures, not notices
    from _common import chat_messages
    from _cycle import berth_url, berth_variant, floor_variant, make_floor

    ctx = {"dir": workdir, "redis": redis_url}
    messages = chat_messages()
    tag = f"ir-{contender}"
    if contender == "berth":
        url, options = berth_url(backend, ctx, tag)
        variant = berth_variant(url, messages, **options)
    else:
        variant = floor_variant(make_floor(backend, ctx, tag), messages)
    try:
        for _ in range(WARMUP + cycles):
            variant.op()
    finally:
        if variant.teardown:
            variant.teardown()


def count(contender: str, backend: str, cycles: int, redis_url: str, keep: str | None, repeat: int) -> int:
    """Instructions (callgrind's Ir total) of a whole child process running `cycles` cycles: the least of `repeat`."""
    return min(_count_once(contender, backend, cycles, redis_url, keep, i) for i in range(repeat))


def _count_once(contender: str, backend: str, cycles: int, redis_url: str, keep: str | None, i: int) -> int:
    with tempfile.TemporaryDirectory(prefix="berth-ir-") as workdir:
        out = os.path.join(keep or workdir, f"{contender}-{backend}-{cycles}" + (f".{i}" if i else "") + ".out")
        child_args = ["--child", contender, backend, str(cycles), workdir, redis_url]
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, *child_args]
        done = subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{contender} on {backend} ({cycles} cycles) failed:\n{done.stderr[-2000:]}")
        with open(out) as f:
            for line in f:
                if line.startswith(("totals:", "summary:")):
                    return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        contender, backend, cycles, workdir, redis_url = sys.argv[2:7]
        child(contender, backend, int(cycles), workdir, redis_url)
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: sqlite, file, redis")
    p.add_argument("--cycles", type=int, default=40, help="cycles counted (a 0-cycle run is subtracted)")
    p.add_argument("--jobs", type=int, default=1, help="valgrind runs at once (each is one CPU)")
    p.add_argument("--redis", default=os.environ.get("BERTH_TEST_REDIS", "redis://127.0.0.1:6379/0"))
    p.add_argument("--repeat", type=int, default=1, help="runs of each count, the least kept")
    p.add_argument("--keep", metavar="DIR", help="keep the callgrind output files in DIR")
    args = p.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKENDS:
            p.error(f"unknown backend {b!r} (one of {', '.join(BACKENDS)})")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    runs = [(c, b, n) for b in backends for c in CONTENDERS for n in (0, args.cycles)]
    t0 = time.monotonic()
    for c, b, _ in runs[::2]:  # compile and cache the bytecode outside the counted runs
        with tempfile.TemporaryDirectory(prefix="berth-ir-") as workdir:
            subprocess.run([sys.executable, __file__, "--child", c, b, "0", workdir, args.redis], check=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        counted = pool.map(lambda r: count(r[0], r[1], r[2], args.redis, args.keep, max(1, args.repeat)), runs)
        totals = dict(zip(runs, counted, strict=True))
    print(f"instructions per 64 KiB cycle ({args.cycles} cycles minus none, least of {args.repeat}, PYTHONHASHSEED=0)")
    print(f"{'backend':8} {'berth':>12} {'floor':>12} {'berth - floor':>14} {'berth / floor':>14}")
    for b in backends:
        per = {c: (totals[(c, b, args.cycles)] - totals[(c, b, 0)]) / args.cycles for c in CONTENDERS}
        print(
            f"{b:8} {per['berth'] / 1e3:11,.0f}k {per['floor'] / 1e3:11,.0f}k "
            f"{(per['berth'] - per['floor']) / 1e3:13,.0f}k {per['berth'] / per['floor']:13.3f}x"
        )
    print(f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
