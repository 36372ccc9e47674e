"""Notifications, measured: delivery latency, losses across a receiver restart, and what a park pays.

Parks runs through `berth.Coordinator.suspend` (SQLite, AES-256-GCM) with a `berth.Webhook` to a
receiver on 127.0.0.1 (a real HTTP server that checks every signature), in four phases:

1. baseline: parks without a webhook (what a park costs with nothing to tell);
2. healthy: parks with the webhook, the receiver up: the delay from each park's return to its
   notice's arrival;
3. restart: the receiver stops partway, parks go on, the receiver comes back after --down seconds:
   notices lost (expected every one, by idempotency id) and how long after it came back the last one arrived;
4. slow: the receiver holds every answer for --hold seconds: how long a park takes meanwhile.

    .venv/bin/python scripts/notify_trial.py [--runs 500] [--down 3] [--hold 2]

It lives under scripts/, not benchmarks/: it uses the test suite's receiver (tests/_receiver.py).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests._net import free_port  # noqa: E402
from tests._receiver import Receiver  # noqa: E402

import berth  # noqa: E402
from berth.testing import make_envelope  # noqa: E402

SECRET = "trial-secret-0123456789abcdef"


def figures(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, max {ordered[-1] * 1000:.2f} ms"


def park(coordinator: berth.Coordinator, key: str) -> tuple[str, float, float]:
    """Suspend one run: (its question id, when suspend returned, how long it took)."""
    started = time.monotonic()
    envelope = coordinator.suspend(key, make_envelope(run_id=key), f"May {key} proceed?")
    done = time.monotonic()
    return envelope.labels["berth.question"], done, done - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=500, help="parks per phase")
    parser.add_argument("--down", type=float, default=3.0, help="seconds the receiver stays down in phase 3")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds the slow receiver holds each answer")
    parser.add_argument("--gap", type=float, default=0.005, help="seconds between parks")
    args = parser.parse_args()
    logging.getLogger("berth.notify").setLevel(logging.CRITICAL)  # phase 3 fails hundreds of attempts on purpose

    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/trial.db"
        store = berth.open_store(url, identity="trial", sealer=sealer)
        receiver = Receiver(SECRET, port=free_port()).start()
        hook = berth.Webhook(receiver.url, secret=SECRET, inbox_url="http://127.0.0.1:8470/")
        plain_questions = berth.open_questions(url, identity="trial", sealer=sealer)
        questions = berth.open_questions(url, identity="trial", sealer=sealer, notify=hook)
        bare = berth.Coordinator(store, plain_questions)
        told = berth.Coordinator(store, questions)

        # 1. baseline
        base = []
        for n in range(args.runs):
            base.append(park(bare, f"base/{n}")[2])
            time.sleep(args.gap)
        print(f"1. park without a webhook ({args.runs} parks): {figures(base)}")

        # 2. healthy receiver
        parked: dict[str, float] = {}
        took = []
        for n in range(args.runs):
            qid, done, cost = park(told, f"healthy/{n}")
            parked[qid] = done
            took.append(cost)
            time.sleep(args.gap)
        receiver.wait_for(args.runs, timeout=30)
        arrived = {r.payload["berth"]["question_id"]: r.at for r in receiver.got if r.valid}
        delays = [arrived[q] - t for q, t in parked.items() if q in arrived]
        late = sum(1 for d in delays if d > 2.0)
        print(f"2. park with a webhook, receiver up: {figures(took)}")
        print(
            f"   park -> arrival: {figures(delays)}; {len(delays)}/{args.runs} arrived, "
            f"{late} later than 2 s; bad signatures: {sum(1 for r in receiver.got if not r.valid)}"
        )

        # 3. the receiver restarts
        first = len(receiver.ids)
        restart_keys: dict[str, float] = {}
        took = []
        half = args.runs // 2
        came_back: list[float] = []

        def back() -> None:
            receiver.start()
            came_back.append(time.monotonic())

        for n in range(args.runs):
            if n == half:
                receiver.stop()
                down_at = time.monotonic()
                threading.Timer(args.down, back).start()
            qid, done, cost = park(told, f"restart/{n}")
            restart_keys[qid] = done
            took.append(cost)
            time.sleep(args.gap)
        complete = receiver.wait_for(first + args.runs, timeout=120)
        up_at = came_back[0]
        got = {r.payload["berth"]["question_id"]: r.at for r in receiver.got if r.valid}
        lost = [q for q in restart_keys if q not in got]
        while_down = [q for q, t in restart_keys.items() if down_at <= t <= up_at]
        last = max((got[q] for q in while_down if q in got), default=up_at)
        print(
            f"3. receiver down {up_at - down_at:.2f} s from park {half} of {args.runs}: park {figures(took)}; "
            f"lost {len(lost)} of {args.runs} ({len(while_down)} parked while it was down); "
            f"{'all' if complete else 'NOT all'} arrived, the last of those {max(0.0, last - up_at):.2f} s after it "
            f"came back; failed attempts {hook.stats.failed_attempts}, dropped {hook.stats.dropped}"
        )

        # 4. a slow receiver
        receiver.hold = threading.Event()
        releaser = threading.Timer(args.hold, receiver.hold.set)
        took = []
        slow_runs = min(args.runs, 100)
        for n in range(slow_runs):
            took.append(park(told, f"slow/{n}")[2])
        held = not receiver.hold.is_set()
        releaser.start()
        hook.flush(60)
        print(
            f"4. receiver holding every answer {args.hold:g} s ({slow_runs} parks, "
            f"{'all while held' if held else 'NOT all while held'}): park {figures(took)}"
        )
        hook.close()
        questions.close()
        plain_questions.close()
        store.close()
        receiver.stop()
        print(
            f"   webhook totals: sent {hook.stats.sent}, failed attempts {hook.stats.failed_attempts}, "
            f"dropped {hook.stats.dropped}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
