"""Each micro-optimisation left in berth against its plain version, in CPU time, interleaved (issue 33).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_microopts.py [--rounds 7]

Rows: `file layout cache` — a 1 KiB sealed save + load on file:// with `backends.file._layout`
as shipped (an `lru_cache` of 4,096 names) and with the plain function put in its place. Each
figure is `time.process_time` over a hot loop divided by its calls (µs); the two versions
alternate within each round in one process, and the median over the rounds is reported with
the share the optimisation saves of the path's CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

KEY = bytes(range(32))


def _per_call(calls: int, fn: Callable[[], object]) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def _file_layout(rounds: int, calls: int) -> tuple[float, float]:
    """(µs with the cache, µs with the plain function) of a 1 KiB save + load on file://."""
    import berth
    from berth.backends import file

    sealer = berth.AesGcmSealer(berth.Keyring({"bench-1": KEY}, "bench-1"))
    state = [{"role": "user", "content": "x" * 200, "n": i} for i in range(4)]
    env = berth.Envelope(provider_state=state, provider="anthropic", model="m", run_id="r")
    cached, plain = file._layout, file._uncached_layout
    kept: list[float] = []
    dropped: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = berth.open_store(f"file://{tmp}", identity="bench", sealer=sealer)
        key = "org/repo#1"

        def cycle() -> None:
            store.save(key, env)
            store.load(key)

        _per_call(calls // 10, cycle)
        for i in range(rounds):
            for version, out in ((cached, kept), (plain, dropped))[:: 1 if i % 2 == 0 else -1]:
                file._layout = version  # type: ignore[assignment]
                out.append(_per_call(calls, cycle))
        file._layout = cached
    return statistics.median(kept), statistics.median(dropped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    rows: dict[str, Any] = {"file layout cache (save+load 1 KiB)": _file_layout(args.rounds, args.calls)}
    for name, (opt, base) in rows.items():
        print(f"{name}: {opt:.1f} µs kept, {base:.1f} µs plain, share {(base - opt) / base * 100:.2f} %")


if __name__ == "__main__":
    main()
