"""What the framework integration tests share: sealed stores over one SQLite file, answering, racing wakers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
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
D = berth.Decision
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

    def decide(
        self,
        decision: str,
        text: str = "",
        *,
        arguments: dict[str, Any] | None = None,
        key: str = KEY,
        by: str = "alice",
    ) -> berth.Answer:
        """Answer the question `<key>/call-1` with a structured decision (as the inbox or `berth answer --edit`)."""
        _, questions = self.open()
        pending = questions.pending(f"{key}/call-1")
        assert pending is not None, f"no question at {key}/call-1"
        return questions.provide(f"{key}/call-1", pending.id, text, by=by, decision=decision, arguments=arguments)

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
    stop = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.0, stop - time.monotonic()))
    assert not [t.name for t in threads if t.is_alive()], "a waker still ran 120 s after the race began"
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

    # --- structured decisions, bound to the call they answer ---------------------------------

    agent_name: ClassVar[str] = ""
    """The agent name the integration puts in its tool approvals ("" where the framework has none)."""

    async def park_again(self, store: Any, questions: Any, result: Any, agent: Any) -> Any:
        """Park a resumed run that stopped for the human again."""
        raise NotImplementedError

    def test_a_tool_approval_is_a_structured_question(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        _, questions = site.open()
        asked = questions.pending(f"{KEY}/call-1")
        assert asked is not None and asked.tool is not None
        assert asked.accepts == (D.APPROVE, D.REJECT, D.EDIT, D.RESPOND)
        tool = asked.tool
        assert (tool.name, dict(tool.arguments), tool.call_id) == (
            "delete_repo",
            {"name": SECRET_REPO},
            self.first_call_id,
        )
        assert tool.description == "Delete a repository for good." and tool.agent == self.agent_name

    def test_an_edit_runs_the_call_with_exactly_the_edited_arguments(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.decide("edit", "only the archive copy", arguments={"name": "acme/payroll-archive-copy"})
        outcomes = race(site, self.wake_with(ran))
        (won,) = [o for o in outcomes if o.decision is RESUME]
        assert ran.calls == [("delete_repo", "acme/payroll-archive-copy")], "ran once, with the edited arguments"
        assert self.output(won.result) == "tools said: deleted acme/payroll-archive-copy"

    def test_an_approval_with_a_note_runs_the_call(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.decide("approve", "fine, it is archived elsewhere")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == [("delete_repo", SECRET_REPO)]

    def test_free_text_that_is_not_exactly_an_approval_never_approves(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("yes but only archive it")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == []
        said = self.output(outcome.result)
        assert "yes but only archive it" in said and berth._answers.ANSWER_BEGIN in said  # fed back to the model

    def test_a_structured_rejection_feeds_its_reason_back(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.decide("reject", "legal hold until 2027")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == []
        assert "legal hold until 2027" in self.output(outcome.result)

    def test_an_answer_is_never_applied_to_another_call_than_the_one_it_was_given_for(self, site: Site) -> None:
        """The answered question names another call than the parked run's: that call is never approved."""
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        _, questions = site.open()
        asked = questions.pending(f"{KEY}/call-1")
        assert asked is not None and asked.tool is not None
        other = berth.ToolRequest(asked.tool.name, dict(asked.tool.arguments), call_id="a-later-call")
        questions.ask(
            f"{KEY}/call-1", asked.prompt, run_id=asked.run_id, question_id=asked.id, accepts=asked.accepts, tool=other
        )
        site.answer("approve")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == []

    def test_a_retried_delivery_never_answers_a_later_approval(self, site: Site) -> None:
        """Approve the first call; the resumed run asks about a second one and is parked again. The first
        answer delivered again (the human's retry, a duplicated webhook) and wakes retried change nothing."""
        ran = Counter()
        second = ("notify", {"channel": "#ops"})
        asyncio.run(self.start_and_park(site, ran, second=second))
        _, questions = site.open()
        first = questions.pending(f"{KEY}/call-1")
        assert first is not None
        site.answer("approve")

        async def wake_and_park_again(store: Any, questions: Any) -> Any:
            agent = self.build(ran, second=second)
            outcome = await self.wake(store, questions, agent)
            if outcome.decision is RESUME:
                await self.park_again(store, questions, outcome.result, agent)
            return outcome

        outcomes = race(site, wake_and_park_again)
        assert [o.decision for o in outcomes].count(RESUME) == 1
        assert ran.calls == [("delete_repo", SECRET_REPO)]
        _, questions = site.open()
        later = questions.pending(f"{KEY}/call-1")
        assert later is not None and later.id != first.id and later.tool is not None and later.tool.name == "notify"
        with pytest.raises(berth.AnswerRefused):  # the first answer, delivered again
            questions.provide(f"{KEY}/call-1", first.id, "approve", by="alice")
        assert questions.answer(f"{KEY}/call-1") is None
        again = race(site, self.wake_with(ran, second=second))
        assert {o.decision for o in again} == {REARM} and ran.calls == [("delete_repo", SECRET_REPO)]
        site.answer("reject: not now")
        last = asyncio.run(site.with_handles(self.wake_with(ran, second=second)))
        assert last.decision is RESUME and ran.calls == [("delete_repo", SECRET_REPO)]

    def test_a_question_asked_before_decisions_is_still_answered_by_its_text(self, site: Site) -> None:
        """A run parked by an earlier berth: its question names no decisions and no call; "approve" still approves."""
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        _, questions = site.open()
        asked = questions.pending(f"{KEY}/call-1")
        assert asked is not None
        questions.ask(f"{KEY}/call-1", asked.prompt, run_id=asked.run_id, question_id=asked.id)  # as before decisions
        site.answer("approve")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == [("delete_repo", SECRET_REPO)]
