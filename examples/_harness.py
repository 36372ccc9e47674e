"""What the framework examples share: sealed store handles, the `berth` command line, racing wakers, set-up."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import berth
import berth.aio

IDENTITY, KEY, WAKERS = "ops-bot", "ops/ticket-7", 4


@contextlib.asynccontextmanager
async def open_site(url: str, keyring: str) -> AsyncIterator[tuple[berth.aio.AsyncStore, berth.aio.AsyncQuestionStore]]:
    """The identity's envelope and question stores (`berth.aio`), sealed under the keyring, as a process opens them."""
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    store = berth.aio.open_store(url, identity=IDENTITY, sealer=sealer)
    questions = berth.aio.open_questions(url, identity=IDENTITY, sealer=sealer)
    async with store, questions:
        yield store, questions


def berth_cli(*args: str) -> str:
    """Run the `berth` command line in its own process (settings from BERTH_URL, ...); its output."""
    exe = Path(sys.executable).with_name("berth")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from berth._cli import main; main()"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"berth {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def berth_answer(key: str, text: str, *, by: str) -> str:
    """Answer the question pending at `key` as an operator does: read its id from `berth questions`, then
    `berth answer KEY TEXT --question ID` (bound to that question: refused if the run asks anew meanwhile)."""
    docs = json.loads(berth_cli("questions", "--json", "--prefix", key))
    (question_id,) = [d["question_id"] for d in docs if d["key"] == key]
    return berth_cli("answer", key, text, "--by", by, "--question", question_id)


def race(url: str, keyring: str, wake: Callable[[Any, Any], Awaitable[Any]]) -> dict[str, Any]:
    """Start WAKERS wakers at one instant, each with its own handles (as another replica's); their outcomes."""
    outcomes: dict[str, Any] = {}
    barrier = threading.Barrier(WAKERS)

    async def one() -> Any:
        async with open_site(url, keyring) as (store, questions):
            return await wake(store, questions)

    def waker(name: str) -> None:
        barrier.wait()
        outcomes[name] = asyncio.run(one())

    threads = [threading.Thread(target=waker, args=(f"waker-{i}",)) for i in range(1, WAKERS + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(sorted(outcomes.items()))


def run(doc: str, main: Callable[[str, str, str], Awaitable[int]]) -> None:
    """Parse --url/--answer, make a keyring in a temporary directory, point the CLI at both, run `main`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--url", help="berth store URL (default: SQLite in a temporary directory)")
    parser.add_argument("--answer", default="approve", help="what the human answers to the approval")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        keyring = os.path.join(tmp, "keys.json")
        berth.Keyring.generate().save(keyring)
        url = args.url or f"sqlite:///{tmp}/berth.db"
        os.environ.update(BERTH_URL=url, BERTH_IDENTITY=IDENTITY, BERTH_KEYRING=keyring)
        sys.exit(asyncio.run(main(url, keyring, args.answer)))


def verdict(outcomes: dict[str, Any], said: Callable[[Any], str], ran: list[str], expected: list[str]) -> int:
    """Print each waker's outcome (`said` renders a resumed result); 0 if one resumed and the tool ran as expected."""
    for name, outcome in outcomes.items():
        what = f": {said(outcome.result)}" if outcome.result is not None else f" ({outcome.wake.reason})"
        print(f"waker:  {name}: {outcome.decision.name}{what}")
    resumed = [o for o in outcomes.values() if o.decision is berth.WakeDecision.RESUME]
    print(f"summary: {len(resumed)} RESUME of {WAKERS} wakers; the tool ran {len(ran)} time(s)")
    return 0 if len(resumed) == 1 and ran == expected else 1
