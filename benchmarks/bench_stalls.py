"""How long berth.aio keeps an event loop from running, on each backend: many small cycles at once, and large states.

    .venv/bin/python benchmarks/bench_stalls.py [--backends memory,file,sqlite,postgres,redis]
                                                [--tasks 300] [--mib 48] [--large 4]

Two rounds per backend, each cycle a sealed save and a claim (AES-256-GCM) on its own key:
`--tasks` 64 KiB chat states all started at once, then `--large` states of `--mib` MiB
(JSON bytes), two at a time. A ticker task sleeps 1 ms at a time and records how late it wakes
(the loop's lag); beside the lag, the part of it the machine caused is taken out: the time the
loop's thread spent runnable but off a CPU (its run-queue wait, /proc/thread-self/schedstat),
which a loaded machine adds and berth cannot. What is left is what held the loop: other tasks'
steps run first (queueing: 300 ready tasks run one after another), a step's own work, or a
worker thread holding the GIL. Every step the loop runs is timed in its thread's CPU time too
(the longest: one call of berth's on the loop before it awaits). A benchmark, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import chat_messages  # noqa: E402
from bench_aio import _async_round, _Steps, envelope, location  # noqa: E402

import berth  # noqa: E402
import berth.aio  # noqa: E402

TICK = 0.001


def _runqueue_wait() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux schedstat; 0 elsewhere)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


async def _ticker(lags: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """(lag, lag less the run-queue wait) of every tick."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start, waited = loop.time(), _runqueue_wait()
        await asyncio.sleep(TICK)
        lag = loop.time() - start - TICK
        lags.append((lag, max(0.0, lag - (_runqueue_wait() - waited))))


@contextmanager
def _where(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if kind == "memory":
        yield "memory://", {}
    elif kind == "file":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"file://{tmp}/store", {}
    else:
        with location(kind, {}) as found:
            yield found


def large_envelope(mib: int) -> berth.Envelope:
    messages = chat_messages()
    copies = max(1, mib * 1024 * 1024 // len(json.dumps(messages)))
    state = json.dumps({"messages": messages * copies}).encode()
    return berth.Envelope(provider="anthropic", model="claude-bench", run_id="bench", provider_state=state)


async def _round(
    store: berth.aio.AsyncStore, env: berth.Envelope, cycles: int, at_once: int, tag: str
) -> dict[str, Any]:
    lags: list[tuple[float, float]] = []
    stop = asyncio.Event()
    load = os.getloadavg()[0]
    with _Steps() as steps:
        ticker = asyncio.create_task(_ticker(lags, stop))
        try:
            await _async_round(store, env, cycles, at_once, tag)  # bench_aio's cycles, `at_once` in flight
        finally:
            stop.set()
            await ticker
    return {
        "lag_max_ms": max(lag for lag, _ in lags) * 1000,
        "lag_less_runqueue_max_ms": max(rest for _, rest in lags) * 1000,
        "step_cpu_max_ms": steps.cpu * 1000,
        "step_what": steps.what,
        "gc_pause_max_ms": steps.gc * 1000,
        "load": load,
    }


async def measure(kind: str, tasks: int, mib: int, large: int) -> dict[str, Any]:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    with _where(kind) as (url, options):
        store = berth.aio.open_store(url, identity="bench", sealer=sealer, **options)
        await store.setup()
        try:
            small, big = envelope(), large_envelope(mib)
            await _round(store, small, 20, 20, "warm")
            out = {"small": await _round(store, small, tasks, tasks, "s")}
            out["large"] = await _round(store, big, large, 2, "l")
        finally:
            await store.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backends", default="memory,file,sqlite,postgres,redis")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--large", type=int, default=4)
    args = parser.parse_args()
    print("| backend | round | ticker lag max | lag less run-queue wait, max | longest step, CPU | GC pause | load |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in args.backends.split(","):
        found = asyncio.run(measure(kind, args.tasks, args.mib, args.large))
        for name, what in (("small", f"{args.tasks} x 64 KiB at once"), ("large", f"{args.large} x {args.mib} MiB")):
            r = found[name]
            print(
                f"| {kind} | {what} | {r['lag_max_ms']:.1f} ms | {r['lag_less_runqueue_max_ms']:.1f} ms "
                f"| {r['step_cpu_max_ms']:.1f} ms | {r['gc_pause_max_ms']:.1f} ms | {r['load']:.1f} |",
                flush=True,
            )
            print(f"<!-- {kind} {name}: longest step {r['step_what']} -->", flush=True)


if __name__ == "__main__":
    main()
