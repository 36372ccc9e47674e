"""How the inbox (`berth serve`) holds up with many open questions and parked runs.

Parks RUNS envelopes (sealed, AES-256-GCM) in an SQLite file, asks a question on
QUESTIONS of them, then times what a request costs: the header listing that one
snapshot takes (shared by every request for `max_age`), a page of 25 cards from a
fresh snapshot and from a cached one, a label filter, and /metrics.

    .venv/bin/python benchmarks/inbox_scale.py [--runs 100000] [--questions 10000] [--db PATH]

A populated --db is reused (delete it to start over).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone

import berth
from berth._serve import Auth, Inbox, Source
from berth._serve._views import metrics_text


def populate(url: str, sealer: berth.Sealer, runs: int, questions: int) -> None:
    store = berth.open_store(url, identity="scale", sealer=sealer)
    qs = berth.open_questions(url, identity="scale", sealer=sealer)
    deadline = datetime.now(timezone.utc) + timedelta(days=7)
    every = max(1, runs // questions)
    started = time.perf_counter()
    for n in range(runs):
        key = f"tenant{n % 50}/run{n}"
        env = berth.Envelope(
            provider="anthropic",
            provider_state={"messages": ["x" * 200]},
            run_id=f"r{n}",
            deadline=deadline,
            labels={"team": f"team{n % 7}"},
        )
        store.save(key, env)
        if n % every == 0 and n // every < questions:
            qs.ask(key, f"Approve step {n}?", run_id=env.run_id, deadline=deadline)
    print(f"parked {runs} runs, {questions} questions in {time.perf_counter() - started:.1f} s")
    store.close()
    qs.close()


def timed(label: str, fn: object, repeat: int = 5) -> None:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    print(f"{label:<44} median {statistics.median(times) * 1000:8.1f} ms  (min {min(times) * 1000:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=10_000)
    parser.add_argument("--db", default=os.path.join(tempfile.gettempdir(), "berth-inbox-scale.db"))
    args = parser.parse_args()
    keyring = os.path.splitext(args.db)[0] + ".keys.json"
    if not os.path.exists(keyring):
        berth.Keyring.generate().save(keyring)
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    url = f"sqlite://{args.db}"
    if not os.path.exists(args.db):
        populate(url, sealer, args.runs, args.questions)
    source = Source(
        "scale",
        berth.open_store(url, identity="scale", sealer=berth.PlaintextSealer()),
        berth.open_questions(url, identity="scale", sealer=sealer),
    )
    fresh = Inbox([source], max_age=0)
    cached = Inbox([source], max_age=3600)
    snap = fresh.snapshot()
    print(f"snapshot: {len(snap.items)} questions, {snap.counts['scale'].parked} parked runs")
    timed("snapshot (every header, no keys)", lambda: fresh.snapshot(fresh=True), repeat=3)
    timed("page of 25 from a fresh snapshot", lambda: fresh.page(limit=25), repeat=3)
    cached.snapshot()
    timed("page of 25, cached snapshot", lambda: cached.page(limit=25))
    timed("page 200 (offset 5000), cached snapshot", lambda: cached.page(offset=5000, limit=25))
    timed("label filter team=team3, cached snapshot", lambda: cached.page(labels=[("team", "team3")]))
    timed("/metrics text, cached snapshot", lambda: metrics_text(cached, Auth(), cached.snapshot()))
    source.store.close()
    source.questions.close()


if __name__ == "__main__":
    main()
