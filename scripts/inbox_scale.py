"""How the inbox (`berth serve`) holds up with many open questions and parked runs.

Parks RUNS envelopes (sealed, AES-256-GCM) in an SQLite file, asks a question on
QUESTIONS of them, then times the listings the inbox makes in the background (all
headers; the question headers alone, with the runs' listing cached) and what a
request costs: a page of 25 cards, a far page, a label filter, /metrics.

    .venv/bin/python scripts/inbox_scale.py [--runs 100000] [--questions 10000] [--db PATH]

A populated --db is reused (delete it to start over). It lives under scripts/, not benchmarks/:
it times the inbox's own internals (`berth._serve`), which no public call reaches, and
benchmarks import nothing private.
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
    url = f"sqlite:///{args.db}"
    if not os.path.exists(args.db):
        populate(url, sealer, args.runs, args.questions)
    source = Source(
        "scale",
        berth.open_store(url, identity="scale", sealer=berth.PlaintextSealer()),
        berth.open_questions(url, identity="scale", sealer=sealer),
    )
    full = Inbox([source], max_age=0)
    snap = full.snapshot()
    print(f"snapshot: {len(snap.items)} questions, {snap.counts['scale'].parked} parked runs")
    timed("full listing: every question and run header", lambda: full.snapshot(fresh=True), repeat=3)
    served = Inbox([source], max_age=1.0, runs_max_age=3600)
    served.snapshot()
    timed("refresh: question headers, runs cached", lambda: served.snapshot(fresh=True), repeat=3)
    timed("page of 25 (what a request costs)", lambda: served.page(limit=25))
    timed("page 200 (offset 5000)", lambda: served.page(offset=5000, limit=25))
    timed("label filter team=team3", lambda: served.page(labels=[("team", "team3")]))
    timed("/metrics text", lambda: metrics_text(served, Auth(), served.snapshot()))
    source.store.close()
    source.questions.close()


if __name__ == "__main__":
    main()
