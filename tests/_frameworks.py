"""What the framework integration tests share: sealed stores over one SQLite file, answering, racing wakers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import berth
import berth.aio
from berth.testing import FakeClock

IDENTITY = "ops-bot"
KEY = "tickets/7"
WAKERS = 4
T = TypeVar("T")


@dataclass
class Site:
    """One identity's storage, as every process of a deployment opens it: a URL, a sealer, a clock."""

    url: str
    sealer: berth.Sealer
    clock: FakeClock = field(default_factory=FakeClock)

    def open(self) -> tuple[berth.Store, berth.QuestionStore]:
        """Fresh handles, as another process would open them."""
        store = berth.open_store(self.url, identity=IDENTITY, sealer=self.sealer, clock=self.clock)
        questions = berth.open_questions(self.url, identity=IDENTITY, sealer=self.sealer, clock=self.clock)
        return store, questions

    @contextlib.asynccontextmanager
    async def aio(self) -> AsyncIterator[tuple[berth.aio.AsyncStore, berth.aio.AsyncQuestionStore]]:
        """Fresh `berth.aio` handles (what an asyncio host opens), closed on exit."""
        store = berth.aio.open_store(self.url, identity=IDENTITY, sealer=self.sealer, clock=self.clock)
        questions = berth.aio.open_questions(self.url, identity=IDENTITY, sealer=self.sealer, clock=self.clock)
        async with store, questions:
            yield store, questions

    async def with_handles(self, use: Callable[[Any, Any], Awaitable[T]], *, native: bool = True) -> T:
        """Run `use(store, questions)` with fresh handles: `berth.aio` ones, or sync ones (`native=False`)."""
        if not native:
            return await use(*self.open())
        async with self.aio() as handles:
            return await use(*handles)

    def answer(self, *texts: str, key: str = KEY, by: str = "alice") -> None:
        """Answer the questions `<key>/call-1`, `<key>/call-2`, ... with `texts`, in order."""
        _, questions = self.open()
        for i, text in enumerate(texts, 1):
            pending = questions.pending(f"{key}/call-{i}")
            assert pending is not None, f"no question at {key}/call-{i}"
            questions.provide(f"{key}/call-{i}", pending.id, text, by=by)

    def frames(self) -> dict[str, bytes]:
        """Every stored frame of the identity's envelopes and questions, by backend name."""
        store, _ = self.open()
        found = {}
        for prefix in (f"{IDENTITY}/", f"{IDENTITY}:"):
            for name in store.backend.scan(prefix):
                got = store.backend.get(name)
                if got is not None:
                    found[name] = bytes(got[0])
        return found

    def tamper(self, key: str = KEY) -> None:
        """Flip one byte near the end of the envelope frame parked under `key`."""
        store, _ = self.open()
        name = f"{IDENTITY}/{key}"
        got = store.backend.get(name)
        assert got is not None
        data = bytearray(got[0])
        data[-3] ^= 0x40
        store.backend.put(name, bytes(data))


def make_site(tmp_path: Path) -> Site:
    return Site(f"sqlite:///{tmp_path / 'berth.db'}", berth.AesGcmSealer(berth.Keyring.generate()))


def race(site: Site, wake: Callable[[Any, Any], Awaitable[Any]], *, native: bool = True) -> list[Any]:
    """Start `WAKERS` threads at one instant, each with its own handles and event loop; return their outcomes."""
    barrier = threading.Barrier(WAKERS)
    outcomes: list[Any] = [None] * WAKERS
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes[i] = asyncio.run(site.with_handles(wake, native=native))
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WAKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return outcomes


class Counter:
    """Counts tool runs across threads."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> None:
        with self._lock:
            self.calls.append(value)


def assert_woken_once_through_sync_stores(
    site: Site, park: Awaitable[Any], wake: Callable[[Any, Any], Awaitable[Any]], ran: Counter, expected: Any
) -> None:
    """Park (through `berth.aio`), approve, race wakers holding sync stores: one resumes, the tool runs once."""
    asyncio.run(park)  # type: ignore[arg-type]
    site.answer("approve")
    outcomes = race(site, wake, native=False)
    assert [o.decision for o in outcomes].count(berth.WakeDecision.RESUME) == 1
    assert ran.calls == [expected]
