"""The uncontended awaited commit points: `berth.aio` claim and wake, one at a time, per call.

    .venv/bin/python benchmarks/bench_commit.py [--calls 2000] [--rounds 5] [--backends memory,sqlite,redis,postgres]

What the cancellation-safe commit point (a conditional delete run to its outcome however the
caller is cancelled, berth._plan) costs when nobody cancels: each round parks `--calls` small
envelopes (and answers their questions), then claims them one by one (`AsyncStore.claim`), and
wakes as many answered runs one by one (`berth.aio.Coordinator.wake`). Prints the median over the
rounds of the microseconds per claim and per wake (the parks are not timed). PostgreSQL and Redis
are natively async (`BERTH_TEST_POSTGRES`, `BERTH_TEST_REDIS`); memory and SQLite run the sync
backend in worker threads. A benchmark, never a test: a shared machine moves its figures.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import berth  # noqa: E402
import berth.aio  # noqa: E402

POSTGRES = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("BERTH_TEST_REDIS", "redis://127.0.0.1:6379/0")


def url_of(kind: str, tmp: str) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp}/bench.db"
    if kind == "redis":
        return f"{REDIS}?prefix=bench-commit-{uuid.uuid4().hex[:8]}:"
    sep = "&" if "?" in POSTGRES else "?"
    return f"{POSTGRES}{sep}table=bench_commit_{uuid.uuid4().hex[:8]}"


async def one_round(url: str, calls: int, sealer: berth.Sealer) -> tuple[float, float]:
    """(µs per claim, µs per wake) of `calls` uncontended calls each."""
    identity = "bench"
    store = berth.aio.open_store(url, identity=identity, sealer=sealer)
    questions = berth.aio.open_questions(url, identity=identity, sealer=sealer) if url != "memory://" else None
    if questions is None:  # memory:// is one store per open: the question store must share its backend
        questions = berth.aio.AsyncQuestionStore(store.backend, identity=identity, sealer=sealer)
    coord = berth.aio.Coordinator(store, questions)
    env = berth.Envelope(provider="p", model="m", config_digest="sha256:" + "0" * 64, provider_state={"x": 1})
    keys = [f"k/{i}" for i in range(calls)]
    for key in keys:
        await store.save(key, env)
    t = time.perf_counter()
    for key in keys:
        assert await store.claim(key) is not None
    claim = (time.perf_counter() - t) / calls * 1e6
    for key in keys:
        await coord.suspend(key, env, "ship it?")
        pending = await questions.pending(key)
        assert pending is not None
        await questions.provide(key, pending.id, "yes")
    t = time.perf_counter()
    for key in keys:
        woke = await coord.wake(key)
        assert woke.decision is berth.WakeDecision.RESUME, woke
    wake = (time.perf_counter() - t) / calls * 1e6
    if url != "memory://":
        await questions.aclose()
    await store.aclose()
    return claim, wake


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="memory,sqlite,redis,postgres")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the plaintext and Redis durability warnings
    sealer = berth.PlaintextSealer()
    kinds = args.backends.split(",")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # interleaved, so the machine's drift falls on every backend alike
            for kind in kinds:
                Path(f"{tmp}/{r}-{kind}").mkdir()
                results[kind].append(asyncio.run(one_round(url_of(kind, f"{tmp}/{r}-{kind}"), args.calls, sealer)))
    print(f"{'backend':<10} {'claim µs':>10} {'wake µs':>10}   (median of {args.rounds} rounds of {args.calls})")
    for kind, rows in results.items():
        claim = statistics.median(c for c, _ in rows)
        wake = statistics.median(w for _, w in rows)
        print(f"{kind:<10} {claim:>10.1f} {wake:>10.1f}")


if __name__ == "__main__":
    main()
