"""berth.aio under load: concurrent park/wake cycles in one event loop, its lag, and the sync API in threads.

    .venv/bin/python benchmarks/bench_aio.py [--tasks 1000] [--threads 64] [--rounds 3]
                                             [--backends sqlite,postgres,redis] [--json out.json]

One cycle = park a 64 KiB JSON chat state sealed with AES-256-GCM (`save`), then wake
it (`claim`: load + conditional delete), on its own key. For each backend:

- async: `--tasks` tasks in one event loop each run one cycle at once, `--rounds`
  times; a ticker task sleeps 1 ms at a time and records how late it wakes (the
  event loop's lag: with 1,000 tasks ready at once it waits for all of their steps),
  and every step the loop runs is timed (the longest one, in CPU and wall time, is
  the longest stall: what one call of berth's does on the loop before it awaits);
- async at the sync run's concurrency (`--threads` tasks), for the like-for-like ratio;
- sync: the same cycles on `berth.Store` from `--threads` threads.

Throughput is cycles per second of wall time (median of the rounds). PostgreSQL uses
`BERTH_TEST_POSTGRES` (a fresh schema, dropped after), Redis `BERTH_TEST_REDIS` (a fresh
prefix, deleted after), SQLite a temporary file. A benchmark, never a test; the figures
of a shared machine move with its load.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import chat_messages  # noqa: E402

import berth  # noqa: E402
import berth.aio  # noqa: E402

POSTGRES = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("BERTH_TEST_REDIS", "redis://127.0.0.1:6379/0")
TICK = 0.001


def envelope() -> berth.Envelope:
    return berth.Envelope(
        provider="anthropic",
        model="claude-bench",
        config_digest="sha256:" + "0" * 64,
        run_id="bench",
        provider_state={"messages": chat_messages()},
    )


@contextmanager
def location(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(URL, options) of a fresh namespace on `kind`, cleaned up afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db", {}
    elif kind == "postgres":
        import psycopg

        schema = f"berth_aio_bench_{uuid.uuid4().hex[:8]}"
        try:
            yield POSTGRES, {"schema": schema, "pool_timeout": 600.0}
        finally:
            with psycopg.connect(POSTGRES, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif kind == "redis":
        import redis

        prefix = f"berth-aio-bench-{uuid.uuid4().hex[:8]}:"
        try:
            yield REDIS, {"prefix": prefix, "check_durability": False}
        finally:
            admin = redis.Redis.from_url(REDIS)
            for key in admin.scan_iter(match=f"{prefix}*"):
                admin.delete(key)
            admin.close()
    else:
        raise SystemExit(f"unknown backend {kind!r}")


class _Steps:
    """The longest single step of the event loop, in this thread's CPU time, with garbage collection apart.

    A step is one callback the loop runs (a task resuming until its next await): what
    it does on the loop holds every other task back. CPU time leaves out the time the
    machine took the thread away, which a loaded machine adds to the wall time. A
    collection of the cyclic GC runs inside whichever step allocates when it is due;
    its pause is the interpreter's (it scans every object the process holds), so it
    is measured apart and left out of the step's own time.
    """

    def __init__(self) -> None:
        self.cpu = self.wall = self.gc = 0.0
        self.what = ""
        self._run: Any = None
        self._in_gc = 0.0
        self._gc_start = 0.0

    def _collect(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.thread_time()
        else:
            pause = time.thread_time() - self._gc_start
            self._in_gc += pause
            self.gc = max(self.gc, pause)

    def __enter__(self) -> _Steps:
        self._run = run = asyncio.events.Handle._run
        steps = self

        def timed(handle: asyncio.events.Handle) -> None:
            gc_before, c, w = steps._in_gc, time.thread_time(), time.perf_counter()
            try:
                run(handle)
            finally:
                cpu = time.thread_time() - c - (steps._in_gc - gc_before)
                if cpu > steps.cpu:
                    steps.cpu, steps.what = cpu, repr(handle)[:160]
                steps.wall = max(steps.wall, time.perf_counter() - w)

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        gc.callbacks.append(self._collect)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._run  # type: ignore[method-assign]
        gc.callbacks.remove(self._collect)


async def _ticker(lags: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(TICK)
        lags.append(loop.time() - start - TICK)


async def async_rounds(url: str, options: dict[str, Any], tasks: int, rounds: int) -> dict[str, Any]:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    env = envelope()
    # a thousand tasks queue for the pool's connections: on a loaded machine the last waits long
    extra = {"pool_timeout": 600.0} if url.startswith("redis") else {}
    store = berth.aio.open_store(url, identity="bench", sealer=sealer, **options, **extra)
    await store.setup()

    async def cycle(key: str) -> None:
        await store.save(key, env)
        if await store.claim(key) is None:
            raise AssertionError(f"lost {key}")

    await asyncio.gather(*(cycle(f"warm/{i}") for i in range(min(tasks, 50))))
    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(lags, stop))
    rates = []
    cpu_start = time.process_time()
    with _Steps() as steps:
        for r in range(rounds):
            start = time.perf_counter()
            await asyncio.gather(*(cycle(f"r{r}/{i}") for i in range(tasks)))
            rates.append(tasks / (time.perf_counter() - start))
    cpu_used = time.process_time() - cpu_start
    stop.set()
    await ticker
    await store.aclose()
    lags.sort()
    return {
        "step_cpu_max_ms": steps.cpu * 1000,
        "step_cpu_max_what": steps.what,
        "gc_pause_max_ms": steps.gc * 1000,
        "cpu_ms_per_cycle": cpu_used * 1000 / (tasks * rounds),
        "step_wall_max_ms": steps.wall * 1000,
        "cycles_per_s": statistics.median(rates),
        "lag_max_ms": lags[-1] * 1000 if lags else 0.0,
        "lag_p99_ms": lags[int(len(lags) * 0.99)] * 1000 if lags else 0.0,
        "ticks": len(lags),
    }


def sync_rounds(url: str, options: dict[str, Any], threads: int, cycles: int, rounds: int) -> dict[str, Any]:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    env = envelope()
    store = berth.open_store(url, identity="bench", sealer=sealer, **options)
    store.setup()

    def cycle(key: str) -> None:
        store.save(key, env)
        if store.claim(key) is None:
            raise AssertionError(f"lost {key}")

    rates = []
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(cycle, [f"warm/{i}" for i in range(min(cycles, 50))]))
        cpu_start = time.process_time()
        for r in range(rounds):
            start = time.perf_counter()
            list(pool.map(cycle, [f"s{r}/{i}" for i in range(cycles)]))
            rates.append(cycles / (time.perf_counter() - start))
        cpu_used = time.process_time() - cpu_start
    store.close()
    return {"cycles_per_s": statistics.median(rates), "cpu_ms_per_cycle": cpu_used * 1000 / (cycles * rounds)}


def measure(kind: str, tasks: int, threads: int, rounds: int) -> dict[str, Any]:
    with location(kind) as (url, options):
        wide = asyncio.run(async_rounds(url, options, tasks, rounds))
        like = asyncio.run(async_rounds(url, options, threads, rounds * max(1, tasks // threads)))
        sync = sync_rounds(url, options, threads, tasks, rounds)
    return {"async_wide": wide, "async_like": like, "sync": sync}


def report(results: dict[str, dict[str, Any]], tasks: int, threads: int) -> str:
    lines = [
        f"| backend | async, {tasks} tasks | async, {threads} tasks | sync, {threads} threads "
        f"| async/sync at {threads} | client CPU per cycle, async / sync "
        f"| longest loop step, berth's CPU | longest GC pause | ticker lag p99 / max ({tasks} tasks) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, r in results.items():
        wide, like, sync = r["async_wide"], r["async_like"], r["sync"]
        cpu = max(wide["step_cpu_max_ms"], like["step_cpu_max_ms"])
        pause = max(wide["gc_pause_max_ms"], like["gc_pause_max_ms"])
        lines.append(
            f"| {kind} | {wide['cycles_per_s']:,.0f}/s | {like['cycles_per_s']:,.0f}/s "
            f"| {sync['cycles_per_s']:,.0f}/s | {like['cycles_per_s'] / sync['cycles_per_s']:.2f}x "
            f"| {like['cpu_ms_per_cycle']:.2f} / {sync['cpu_ms_per_cycle']:.2f} ms "
            f"| {cpu:.1f} ms | {pause:.0f} ms | {wide['lag_p99_ms']:.0f} / {wide['lag_max_ms']:.0f} ms |"
        )
    longest = {kind: r["async_wide"]["step_cpu_max_what"] for kind, r in results.items()}
    lines += ["", f"Longest steps ({tasks} tasks):", *(f"- {kind}: {what}" for kind, what in longest.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    for kind in args.backends.split(","):
        print(f"{kind} ...", file=sys.stderr, flush=True)
        results[kind] = measure(kind, args.tasks, args.threads, args.rounds)
    print(report(results, args.tasks, args.threads))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
