"""What the framework integration tests share: sealed stores over one SQLite file, answering, racing wakers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

import berth
import berth.aio
from berth.testing import FakeClock

IDENTITY = "ops-bot"
KEY = "tickets/7"
WAKERS = 4
SECRET_REPO = "acme/payroll-archive"
FRESH, REARM, RESUME = berth.WakeDecision.FRESH, berth.WakeDecision.REARM, berth.WakeDecision.RESUME
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


class HitlScenarios:
    """What every tool-approval integration must do, whatever the framework: one subclass per integration.

    A subclass names its module's `park`/`wake` through the hooks below, with an agent whose risky
    tool `delete_repo(SECRET_REPO)` needs approval and is recorded in `ran` when it runs.
    """

    provider: ClassVar[str]
    first_call_id: ClassVar[str]

    def build(self, ran: Counter, **kw: Any) -> Any:
        raise NotImplementedError

    async def start_and_park(self, site: Site, ran: Counter, *, native: bool = True, **kw: Any) -> berth.Envelope:
        """Run the agent until it stops for approval and park it (through `berth.aio`, or sync stores)."""
        raise NotImplementedError

    async def wake(self, store: Any, questions: Any, agent: Any) -> Any:
        raise NotImplementedError

    def config_digest(self, agent: Any) -> str:
        raise NotImplementedError

    def output(self, result: Any) -> str:
        """The resumed run's final text."""
        raise NotImplementedError

    def wake_with(self, ran: Counter, **kw: Any) -> Callable[[Any, Any], Awaitable[Any]]:
        async def wake(store: Any, questions: Any) -> Any:
            return await self.wake(store, questions, self.build(ran, **kw))

        return wake

    @pytest.fixture
    def site(self, tmp_path: Path) -> Site:
        return make_site(tmp_path)

    def test_park_answer_and_exactly_one_of_four_wakers_resumes(self, site: Site) -> None:
        ran = Counter()
        envelope = asyncio.run(self.start_and_park(site, ran))
        assert envelope.provider == self.provider
        assert envelope.config_digest == self.config_digest(self.build(ran))
        assert [(c.id, c.name, c.input_value()) for c in envelope.pending_calls] == [
            (self.first_call_id, "delete_repo", {"name": SECRET_REPO})
        ]
        _, questions = site.open()
        asked = questions.pending(f"{KEY}/call-1")
        assert asked is not None and "delete_repo" in asked.prompt and SECRET_REPO in asked.prompt
        assert all(SECRET_REPO.encode() not in frame for frame in site.frames().values()), "sealed at rest"

        early = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert early.decision is REARM and early.result is None and ran.calls == []

        site.answer("approve")
        outcomes = race(site, self.wake_with(ran))
        decisions = [o.decision for o in outcomes]
        assert decisions.count(RESUME) == 1, decisions
        assert set(decisions) <= {RESUME, REARM, FRESH}
        assert ran.calls == [("delete_repo", SECRET_REPO)], "the approved tool ran exactly once"
        (won,) = [o for o in outcomes if o.decision is RESUME]
        assert self.output(won.result) == f"tools said: deleted {SECRET_REPO}"
        assert won.wake.answer.by == "alice"
        store, questions = site.open()
        assert store.load(KEY) is None and questions.pending(f"{KEY}/call-1") is None
        assert asyncio.run(site.with_handles(self.wake_with(ran))).decision is FRESH

    def test_past_the_deadline_nothing_resumes(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("approve")
        site.clock.advance(timedelta(days=14, seconds=1))
        outcomes = race(site, self.wake_with(ran))
        assert {o.decision for o in outcomes} == {FRESH}
        assert any(o.wake.reason == "expired" for o in outcomes)
        assert ran.calls == []
        store, questions = site.open()
        assert store.load(KEY, allow_expired=True) is None and questions.pending(f"{KEY}/call-1") is None

    def test_a_tampered_frame_is_refused(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("approve")
        site.tamper()
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is REARM and isinstance(outcome.wake.error, berth.IntegrityError)
        assert ran.calls == [] and outcome.result is None

    def test_a_changed_agent_is_drift_and_never_resumes(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("approve")
        changed = "You run ops, and you may delete anything."
        assert self.config_digest(self.build(ran, instructions=changed)) != self.config_digest(self.build(ran))
        outcome = asyncio.run(site.with_handles(self.wake_with(ran, instructions=changed)))
        assert outcome.decision is FRESH and outcome.wake.reason == "drifted"
        assert ran.calls == []
        assert site.open()[0].load(KEY) is None

    def test_sync_stores_work_too_and_interoperate(self, site: Site) -> None:
        """Parked through `berth.aio`, woken by racers holding sync stores: one resumes, the tool runs once."""
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran, native=True))
        site.answer("approve")
        outcomes = race(site, self.wake_with(ran), native=False)
        assert [o.decision for o in outcomes].count(RESUME) == 1
        assert ran.calls == [("delete_repo", SECRET_REPO)]
