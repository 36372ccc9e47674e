"""The uncontended awaited commit points: `berth.aio` claim and wake, one at a time, per call.

    .venv/bin/python benchmarks/bench_commit.py [--calls 2000] [--rounds 5] [--backends memory,sqlite,redis,postgres]

What the cancellation-safe commit point (a conditional delete run to its outcome however the
caller is cancelled, berth._plan) costs when nobody cancels: each round parks `--calls` small
envelopes (and answers their questions), then claims them one by one (`AsyncStore.claim`), and
wakes as many answered runs one by one (`berth.aio.AsyncCoordinator.wake`). Prints the median over the
rounds of the microseconds per claim and per wake (the parks are not timed), in wall time and in
this process's CPU time (user + system: what berth itself spends, which the load of a shared
machine moves far less than wall time). PostgreSQL and Redis
are natively async (`BERTH_TEST_POSTGRES`, `BERTH_TEST_REDIS`); memory and SQLite run the sync
backend in worker threads. `--loop` adds "loop": a memory backend awaited on the event loop itself
(no thread, no socket), where nothing but berth's own steps is timed -- the cost of the commit
point's machinery alone (min over rounds: the least disturbed). A benchmark, never a test: a
shared machine moves its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import berth  # noqa: E402
import berth.aio  # noqa: E402
import berth.backends._aio  # noqa: E402

POSTGRES = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("BERTH_TEST_REDIS", "redis://127.0.0.1:6379/0")


class OnLoop(berth.backends._aio.AsyncBackend):
    """A memory backend awaited with no thread hop: each call runs in place, on the loop."""

    def __init__(self) -> None:
        from berth.backends.memory import MemoryBackend

        self.sync = MemoryBackend()

    async def put(self, name: str, data: bytes, *, if_match: Any = None, if_absent: bool = False) -> berth.Token:
        return self.sync.put(name, data, if_match=if_match, if_absent=if_absent)

    async def get(self, name: str) -> Any:
        return self.sync.get(name)

    async def delete(self, name: str, token: berth.Token) -> None:
        self.sync.delete(name, token)


def url_of(kind: str, tmp: str) -> str:
    if kind == "loop":
        return "loop"
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp}/bench.db"
    if kind == "redis":
        return f"{REDIS}?prefix=bench-commit-{uuid.uuid4().hex[:8]}:"
    sep = "&" if "?" in POSTGRES else "?"
    return f"{POSTGRES}{sep}table=bench_commit_{uuid.uuid4().hex[:8]}"


async def one_round(url: str, calls: int, sealer: berth.Sealer) -> tuple[float, float, float, float]:
    """(µs per claim, µs per wake, CPU µs per claim, CPU µs per wake) of `calls` uncontended calls each."""
    identity = "bench"
    if url == "loop":
        store = berth.aio.AsyncStore(OnLoop(), identity=identity, sealer=sealer)
    else:
        store = berth.aio.open_store(url, identity=identity, sealer=sealer)
    if url in ("memory://", "loop"):  # one store per open: the question store must share its backend
        questions = berth.aio.AsyncQuestionStore(store.backend, identity=identity, sealer=sealer)
    else:
        questions = berth.aio.open_questions(url, identity=identity, sealer=sealer)
    coord = berth.aio.AsyncCoordinator(store, questions)
    env = berth.Envelope(provider="p", model="m", config_digest="sha256:" + "0" * 64, provider_state={"x": 1})
    keys = [f"k/{i}" for i in range(calls)]
    for key in keys:
        await store.save(key, env)
    t, c = time.perf_counter(), time.process_time()
    for key in keys:
        assert await store.claim(key) is not None
    claim = (time.perf_counter() - t) / calls * 1e6
    claim_cpu = (time.process_time() - c) / calls * 1e6
    for key in keys:
        await coord.suspend(key, env, "ship it?")
        pending = await questions.pending(key)
        assert pending is not None
        await questions.provide(key, pending.id, "yes")
    t, c = time.perf_counter(), time.process_time()
    for key in keys:
        woke = await coord.wake(key)
        assert woke.decision is berth.WakeDecision.RESUME, woke
    wake = (time.perf_counter() - t) / calls * 1e6
    wake_cpu = (time.process_time() - c) / calls * 1e6
    if url not in ("memory://", "loop"):
        await questions.aclose()
    await store.aclose()
    return claim, wake, claim_cpu, wake_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="memory,sqlite,redis,postgres")
    parser.add_argument("--loop", action="store_true", help="add the on-loop memory backend (berth's steps alone)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the plaintext and Redis durability warnings
    sealer = berth.PlaintextSealer()
    kinds = (["loop"] if args.loop else []) + args.backends.split(",")
    results: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # interleaved, so the machine's drift falls on every backend alike
            for kind in kinds:
                Path(f"{tmp}/{r}-{kind}").mkdir()
                results[kind].append(asyncio.run(one_round(url_of(kind, f"{tmp}/{r}-{kind}"), args.calls, sealer)))
    print(f"median of {args.rounds} rounds of {args.calls} calls; µs per call, wall and this process's CPU")
    print(f"{'backend':<10} {'claim':>10} {'claim CPU':>10} {'wake':>10} {'wake CPU':>10}")
    for kind, rows in results.items():
        pick = min if kind == "loop" else statistics.median
        claim, wake, claim_cpu, wake_cpu = (pick(row[i] for row in rows) for i in range(4))
        print(f"{kind:<10} {claim:>10.1f} {claim_cpu:>10.1f} {wake:>10.1f} {wake_cpu:>10.1f}")


if __name__ == "__main__":
    main()
