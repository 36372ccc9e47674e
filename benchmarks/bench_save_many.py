"""Filling a store: saves one by one against `save_many`, in saves per second, sync and async.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_save_many.py [--items 2000] [--rounds 3]
        [--postgres postgresql://postgres@127.0.0.1:5432/test] [--redis redis://127.0.0.1:6379/0]
        [--only sqlite,postgresql,redis]

Each row parks `--items` AES-GCM sealed envelopes (a 1 KiB JSON state each) under fresh keys of an
empty store: `one by one` with `save` in a loop (awaited in turn, async), `save_many` with one call
(chunks of 500: one transaction on SQLite and PostgreSQL, one pipeline on Redis). SQLite runs its
default `synchronous=FULL` (every transaction fsynced), PostgreSQL and Redis the servers given (the
project's CI servers by default); Redis with `check_durability=false` (the CI server keeps no
append-only file). Reported: the median saves/s over `--rounds` rounds (the two modes alternate
within a round) and the ratio save_many ÷ one by one. The goal of issue 35: ≥ 10× on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import berth
import berth.aio

KEY = bytes(range(32))
SEALER = berth.AesGcmSealer(berth.Keyring({"k1": KEY}, "k1"))


def _envelope(i: int) -> berth.Envelope:
    return berth.Envelope(
        provider="bench",
        model="m",
        config_digest="sha256:" + "0" * 64,
        run_id=f"run-{i}",
        provider_state={"messages": [{"role": "user", "content": "x" * 1000}]},
        reason="awaiting answer",
    )


def _one_by_one(store: berth.Store, batch: list[tuple[str, berth.Envelope]]) -> None:
    for key, env in batch:
        store.save(key, env)


def _many(store: berth.Store, batch: list[tuple[str, berth.Envelope]]) -> None:
    results = store.save_many(batch)
    assert all(r.ok for r in results)


async def _aone_by_one(store: Any, batch: list[tuple[str, berth.Envelope]]) -> None:
    for key, env in batch:
        await store.save(key, env)


async def _amany(store: Any, batch: list[tuple[str, berth.Envelope]]) -> None:
    results = await store.save_many(batch)
    assert all(r.ok for r in results)


def _timed_sync(url: str, fill: Callable[..., Any], items: int) -> float:
    identity = f"b{uuid.uuid4().hex[:12]}"
    batch = [(f"fill/{i:06d}", _envelope(i)) for i in range(items)]
    with berth.open_store(url, identity=identity, sealer=SEALER) as store:
        store.save("warm", _envelope(-1))  # connection and schema made before the clock starts
        start = time.perf_counter()
        fill(store, batch)
        spent = time.perf_counter() - start
        store.delete_prefix("")
    return items / spent


def _timed_async(url: str, fill: Callable[..., Any], items: int) -> float:
    identity = f"b{uuid.uuid4().hex[:12]}"
    batch = [(f"fill/{i:06d}", _envelope(i)) for i in range(items)]

    async def main() -> float:
        async with berth.aio.open_store(url, identity=identity, sealer=SEALER) as store:
            await store.save("warm", _envelope(-1))
            start = time.perf_counter()
            await fill(store, batch)
            spent = time.perf_counter() - start
            await store.delete_prefix("")
        return items / spent

    return asyncio.run(main())


def measure(url: str, items: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Saves/s one by one and with save_many, sync then async, the two alternating round by round.

    What benchmarks/run.py calls (`--only save_many`): {"sync": {"one": [...], "many": [...]}, "async": ...}.
    """
    modes: list[tuple[str, Callable[[str, Callable[..., Any], int], float], Any, Any]] = [
        ("sync", _timed_sync, _one_by_one, _many),
        ("async", _timed_async, _aone_by_one, _amany),
    ]
    out: dict[str, dict[str, list[float]]] = {}
    for mode, timed, one, many in modes:
        rates: dict[str, list[float]] = {"one": [], "many": []}
        for _ in range(rounds):
            rates["one"].append(timed(url, one, items))
            rates["many"].append(timed(url, many, items))
        out[mode] = rates
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--only", default="sqlite,postgresql,redis")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-many-"))
    urls = {
        "sqlite": f"sqlite:///{tmp}/fill.db",
        "postgresql": f"{args.postgres}{'&' if '?' in args.postgres else '?'}schema=berth_bench_many",
        "redis": f"{args.redis}{'&' if '?' in args.redis else '?'}prefix=benchmany&check_durability=false",
    }
    print(f"{args.items} saves of a 1 KiB state, AES-GCM, median of {args.rounds} rounds (saves/s)")
    print(f"{'backend':<11} {'mode':<6} {'one by one':>11} {'save_many':>10} {'ratio':>7}")
    for name in args.only.split(","):
        for mode, rates in measure(urls[name], args.items, args.rounds).items():
            single, batched = statistics.median(rates["one"]), statistics.median(rates["many"])
            print(f"{name:<11} {mode:<6} {single:>11,.0f} {batched:>10,.0f} {batched / single:>6.1f}×", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
