"""berth.aio under load: concurrent park/wake cycles in one event loop, its lag, and the sync API in threads.

    .venv/bin/python benchmarks/bench_aio.py [--tasks 1000] [--threads 32] [--rounds 3]
                                             [--backends sqlite,postgres,redis] [--json out.json]
    .venv/bin/python benchmarks/run.py --only aio      # the same, into docs/benchmarks.md (section 7)

One cycle = park a 64 KiB JSON chat state sealed with AES-256-GCM (`save`), then wake
it (`claim`: load + conditional delete), on its own key. For each backend, round by
round, interleaved (so the load of a shared machine falls on all three alike):

- async at the sync run's concurrency: `--tasks` cycles, at most `--threads` at once
  (a semaphore), in one event loop -- the like-for-like ratio;
- sync: the same `--tasks` cycles on `berth.Store` from `--threads` threads;
- async, wide: `--tasks` tasks in one event loop each run one cycle at once;
- the first two again with every thread of the process on one CPU (the same CPU budget
  for the loop and for the threads: the threads cannot overlap their work on two cores).

During the async rounds a ticker task sleeps 1 ms at a time and records how late it
wakes (the event loop's lag: with 1,000 tasks ready at once it waits for all of their
steps), and every step the loop runs is timed (the longest one, in CPU and wall time,
is the longest stall: what one call of berth's does on the loop before it awaits).

Throughput is cycles per second of wall time (median of the rounds); each round
records the 1-minute load average. PostgreSQL uses `BERTH_TEST_POSTGRES` (a fresh
schema, dropped after), Redis `BERTH_TEST_REDIS` (a fresh prefix, deleted after),
SQLite a temporary file. A benchmark, never a test; the figures of a shared machine
move with its load.
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
def location(kind: str, urls: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(URL, options) of a fresh namespace on `kind` (servers from `urls`, else the env), cleaned up afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db", {}
    elif kind == "postgres":
        import psycopg

        dsn = urls.get("postgres") or POSTGRES
        schema = f"berth_aio_bench_{uuid.uuid4().hex[:8]}"
        try:
            yield dsn, {"schema": schema, "pool_timeout": 600.0}
        finally:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif kind == "redis":
        import redis

        url = urls.get("redis") or REDIS
        prefix = f"berth-aio-bench-{uuid.uuid4().hex[:8]}:"
        try:
            yield url, {"prefix": prefix, "check_durability": False}
        finally:
            client = redis.Redis.from_url(url)
            for key in client.scan_iter(match=f"{prefix}*"):
                client.delete(key)
            client.close()
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
        self.cpu = self.wall = self.gc = self.whole = 0.0
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
                whole = time.thread_time() - c
                steps.whole = max(steps.whole, whole)
                cpu = whole - (steps._in_gc - gc_before)
                if cpu > steps.cpu:
                    steps.cpu, steps.what = cpu, repr(handle)[:160]
                steps.wall = max(steps.wall, time.perf_counter() - w)

        asyncio.events.Handle._run = timed  # type: ignore[method-assign, assignment]
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


async def _open_async(url: str, options: dict[str, Any], sealer: berth.Sealer) -> berth.aio.AsyncStore:
    # a thousand tasks queue for the pool's connections: on a loaded machine the last waits long
    # (a Redis server's pool and a cluster's gate take `pool_timeout`)
    pooled = ("redis://", "rediss://", "redis+cluster://", "rediss+cluster://")
    extra: dict[str, Any] = {"pool_timeout": 600.0} if url.startswith(pooled) else {}
    store = berth.aio.open_store(url, identity="bench", sealer=sealer, **options, **extra)
    await store.setup()
    return store


async def _async_round(store: berth.aio.AsyncStore, env: berth.Envelope, cycles: int, at_once: int, tag: str) -> float:
    """`cycles` cycles with at most `at_once` in flight; cycles per second."""
    gate = asyncio.Semaphore(at_once)

    async def cycle(key: str) -> None:
        async with gate:
            await store.save(key, env)
            if await store.claim(key) is None:
                raise AssertionError(f"lost {key}")

    start = time.perf_counter()
    await asyncio.gather(*(cycle(f"{tag}/{i}") for i in range(cycles)))
    return cycles / (time.perf_counter() - start)


class _Async:
    """Rounds of one async contender: rates, client CPU, and the loop's longest step and lag."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.cpu = 0.0
        self.cycles = 0
        self.step_cpu = self.step_wall = self.gc = self.step_whole = 0.0
        self.what = ""
        self.lags: list[float] = []

    def round(self, loop: asyncio.AbstractEventLoop, run: Any, cycles: int) -> None:
        async def ticked() -> float:
            stop = asyncio.Event()
            ticker = asyncio.create_task(_ticker(self.lags, stop))
            try:
                rate: float = await run
            finally:
                stop.set()
                await ticker
            return rate

        cpu = time.process_time()
        with _Steps() as steps:
            self.rates.append(loop.run_until_complete(ticked()))
        self.cpu += time.process_time() - cpu
        self.cycles += cycles
        if steps.cpu > self.step_cpu:
            self.step_cpu, self.what = steps.cpu, steps.what
        self.step_wall = max(self.step_wall, steps.wall)
        self.step_whole = max(self.step_whole, steps.whole)
        self.gc = max(self.gc, steps.gc)

    def result(self) -> dict[str, Any]:
        lags = sorted(self.lags)
        return {
            "rates": self.rates,
            "cycles_per_s": statistics.median(self.rates),
            "cpu_ms_per_cycle": self.cpu * 1000 / max(1, self.cycles),
            "step_cpu_max_ms": self.step_cpu * 1000,
            "step_cpu_max_what": self.what,
            "step_wall_max_ms": self.step_wall * 1000,
            "step_cpu_gc_max_ms": self.step_whole * 1000,
            "gc_pause_max_ms": self.gc * 1000,
            "lag_max_ms": lags[-1] * 1000 if lags else 0.0,
            "lag_p99_ms": lags[int(len(lags) * 0.99)] * 1000 if lags else 0.0,
            "ticks": len(lags),
        }


def measure(kind: str, tasks: int, threads: int, rounds: int, urls: dict[str, str] | None = None) -> dict[str, Any]:
    """Interleaved rounds of async (at `threads` at once), sync (`threads` threads) and async wide, on `kind`."""
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    env = envelope()
    with location(kind, urls or {}) as (url, options):
        loop = asyncio.new_event_loop()
        astore = loop.run_until_complete(_open_async(url, options, sealer))
        sstore = berth.open_store(url, identity="bench", sealer=sealer, **options)
        sstore.setup()

        def cycle(key: str) -> None:
            sstore.save(key, env)
            if sstore.claim(key) is None:
                raise AssertionError(f"lost {key}")

        like, wide, like_one = _Async(), _Async(), _Async()
        sync_rates: list[float] = []
        sync_one: list[float] = []
        sync_cpu = 0.0
        loads: list[float] = []
        every = os.sched_getaffinity(0)
        one = {max(every)}

        def sync_round(tag: str) -> float:
            start = time.perf_counter()
            list(pool.map(cycle, [f"{tag}/{i}" for i in range(tasks)]))
            return tasks / (time.perf_counter() - start)

        try:
            with ThreadPoolExecutor(threads) as pool:
                warm = min(tasks, 50)
                loop.run_until_complete(_async_round(astore, env, warm, threads, "warm-a"))
                list(pool.map(cycle, [f"warm-s/{i}" for i in range(warm)]))
                for r in range(rounds):
                    loads.append(os.getloadavg()[0])
                    like.round(loop, _async_round(astore, env, tasks, threads, f"a{r}"), tasks)
                    cpu = time.process_time()
                    sync_rates.append(sync_round(f"s{r}"))
                    sync_cpu += time.process_time() - cpu
                    wide.round(loop, _async_round(astore, env, tasks, tasks, f"w{r}"), tasks)
                    # The same two on one core: the same CPU budget for the loop and for the threads.
                    _pin(one)
                    try:
                        like_one.round(loop, _async_round(astore, env, tasks, threads, f"a1-{r}"), tasks)
                        sync_one.append(sync_round(f"s1-{r}"))
                    finally:
                        _pin(every)
        finally:
            sstore.close()
            loop.run_until_complete(astore.aclose())
            loop.close()
    sync = {
        "rates": sync_rates,
        "cycles_per_s": statistics.median(sync_rates),
        "cpu_ms_per_cycle": sync_cpu * 1000 / (tasks * rounds),
    }
    ratios = [a / s for a, s in zip(like.rates, sync_rates, strict=True)]
    return {
        "async_wide": wide.result(),
        "async_like": like.result(),
        "sync": sync,
        "ratios": ratios,
        "one_core": {"async": like_one.rates, "sync": sync_one},
        "ratios_one_core": [a / s for a, s in zip(like_one.rates, sync_one, strict=True)],
        "loads": loads,
        "tasks": tasks,
        "threads": threads,
    }


def _pin(cpus: set[int]) -> None:
    """Every thread of this process onto `cpus` (threads made later inherit it from their maker)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, OSError):
            pass  # a thread that ended meanwhile


STALL_TASKS = 300
STALL_LARGE = 48 << 20


async def _large_cycles(store: berth.aio.AsyncStore, env: berth.Envelope, cycles: int, tag: str) -> float:
    """`cycles` park/wake cycles of a large state, one after another; cycles per second."""
    start = time.perf_counter()
    for i in range(cycles):
        await store.save(f"{tag}/{i}", env)
        if await store.claim(f"{tag}/{i}") is None:
            raise AssertionError(f"lost {tag}/{i}")
    return cycles / (time.perf_counter() - start)


def stalls(url: str, options: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The worst event-loop stall of issue 35: 300 sealed 64 KiB cycles at once, then 48 MiB states one by one.

    Each is `_Async.round`: every loop step timed (its thread's CPU time with any GC collection
    inside it, and apart from it; wall time) while the 1 ms ticker records the loop's lag.
    """
    from _common import big_state_bytes

    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    small = envelope()
    big = berth.Envelope(
        provider="anthropic",
        model="claude-bench",
        config_digest="sha256:" + "0" * 64,
        run_id="bench",
        provider_state={"messages": json.loads(big_state_bytes(STALL_LARGE))},
    )
    rounds, large = (1, 1) if quick else (3, 3)
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(_open_async(url, options, sealer))
    tag = f"stall-{uuid.uuid4().hex[:8]}"
    try:
        loop.run_until_complete(_async_round(store, small, 20, 20, f"{tag}/warm"))
        concurrent, one_by_one = _Async(), _Async()
        for r in range(rounds):
            concurrent.round(loop, _async_round(store, small, STALL_TASKS, STALL_TASKS, f"{tag}/c{r}"), STALL_TASKS)
        for r in range(large):
            one_by_one.round(loop, _large_cycles(store, big, 1, f"{tag}/l{r}"), 1)
    finally:
        loop.run_until_complete(store.aclose())
        loop.close()
    return {
        f"64KiB x{STALL_TASKS}": concurrent.result(),
        f"{STALL_LARGE >> 20}MiB": one_by_one.result(),
        "load": os.getloadavg()[0],
    }


def run(kinds: list[str], urls: dict[str, str], quick: bool) -> dict[str, Any]:
    """What benchmarks/run.py calls: every backend of `kinds`, quick mode small."""
    tasks, threads, rounds = (200, 32, 2) if quick else (1000, 32, 5)
    out: dict[str, Any] = {}
    for kind in kinds:
        try:
            out[kind] = measure(kind, tasks, threads, rounds, urls)
        except Exception as exc:
            out[kind] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


def report(results: dict[str, dict[str, Any]], tasks: int, threads: int) -> str:
    lines = [
        f"| backend | async, {tasks} tasks | async, {threads} at once | sync, {threads} threads "
        f"| async/sync at {threads} (median, min-max) | client CPU per cycle, async / sync "
        f"| longest loop step, berth's CPU | longest GC pause | ticker lag p99 / max ({tasks} tasks) | load avg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, r in results.items():
        if "error" in r:
            lines.append(f"| {kind} | not measured: {r['error']} |")
            continue
        wide, like, sync = r["async_wide"], r["async_like"], r["sync"]
        cpu = max(wide["step_cpu_max_ms"], like["step_cpu_max_ms"])
        pause = max(wide["gc_pause_max_ms"], like["gc_pause_max_ms"])
        ratios = r["ratios"]
        lines.append(
            f"| {kind} | {wide['cycles_per_s']:,.0f}/s | {like['cycles_per_s']:,.0f}/s "
            f"| {sync['cycles_per_s']:,.0f}/s "
            f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
            f"| {like['cpu_ms_per_cycle']:.2f} / {sync['cpu_ms_per_cycle']:.2f} ms "
            f"| {cpu:.1f} ms | {pause:.0f} ms | {wide['lag_p99_ms']:.0f} / {wide['lag_max_ms']:.0f} ms "
            f"| {min(r['loads']):.1f}-{max(r['loads']):.1f} |"
        )
    longest = {kind: r["async_wide"]["step_cpu_max_what"] for kind, r in results.items() if "error" not in r}
    lines += ["", f"Longest steps ({tasks} tasks):", *(f"- {kind}: {what}" for kind, what in longest.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=32)
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
