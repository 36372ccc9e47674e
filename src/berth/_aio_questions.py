"""`AsyncQuestionStore` and the async `Coordinator`: the question store and suspend/wake, awaited.

Both await the plans (`berth._plan`) the sync classes run: `QuestionCore`'s
(the question store's reads and compare-and-swap loops) and `Coordinator`'s
suspend and wake are written once, as generators of store calls, and awaited
here against `AsyncStore`s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from berth._aio_store import AsyncStore
from berth._coordinator import Coordinator as SyncCoordinator
from berth._coordinator import Wake
from berth._envelope import Envelope
from berth._notify import Webhook
from berth._plan import arun
from berth._questions import NAMESPACE, Answer, Decision, Question, QuestionStore, ToolRequest
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, Listing
from berth.backends._aio import AsyncBackend, sync_twin

__all__ = ["AsyncQuestionStore", "Coordinator"]


class AsyncQuestionStore:
    """`berth.QuestionStore` awaited: `await ask/pending/answer/record/provide/consume/sweep`, `async for` list.

    Same records, semantics and errors as the sync store (a sync and an async
    question store over the same backend see the same questions).
    """

    def __init__(
        self,
        backend: AsyncBackend,
        *,
        identity: str,
        sealer: Sealer | None = None,
        accept_plaintext: bool = False,
        max_record_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        clock: Callable[[], datetime] | None = None,
        notify: Webhook | None = None,
    ):
        """Wrap an async backend (arguments as `berth.QuestionStore`'s)."""
        options: dict[str, Any] = {
            "identity": identity,
            "sealer": sealer,
            "accept_plaintext": accept_plaintext,
            "clock": clock,
        }
        self._sync = QuestionStore(sync_twin(backend), max_record_bytes=max_record_bytes, notify=notify, **options)
        self.notify = self._sync.notify
        """Told of every question asked and answer given through this store, as `QuestionStore.notify`."""
        # The sync store's decisions (its core), awaited against the namespace's frames as an AsyncStore.
        self._core = self._sync.core
        self._frames = AsyncStore(backend, max_envelope_bytes=max_record_bytes, namespace=NAMESPACE, **options)
        self._targets = {"frames": self._frames}
        self.identity = self._core.identity

    def __repr__(self) -> str:
        return f"AsyncQuestionStore({self._frames.backend!r}, identity={self.identity!r})"

    @property
    def sync(self) -> QuestionStore:
        """The sync `QuestionStore` over the same backend and sealer."""
        return self._sync

    def now(self) -> datetime:
        """The store's clock."""
        return self._core.clock()

    async def __aenter__(self) -> AsyncQuestionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the backend's connections and threads; with `notify`, first wait (off the loop) for its queue."""
        if self.notify is not None:
            await asyncio.to_thread(self.notify.flush, self.notify.close_timeout)
        await self._frames.aclose()

    async def ask(
        self,
        key: str,
        prompt: str,
        *,
        run_id: str = "",
        question_id: str | None = None,
        deadline: datetime | None = None,
        accepts: Iterable[Decision | str] = (),
        tool: ToolRequest | None = None,
    ) -> Question:
        """Ask a human `prompt` about the run parked under `key`, as `QuestionStore.ask`."""
        question = await arun(self._core.ask(key, prompt, run_id, question_id, deadline, accepts, tool), self._targets)
        if self.notify is not None:
            self.notify.asked(self.identity, question, deadline)  # queued: never waits, never raises
        return question

    async def pending(self, key: str) -> Question | None:
        """The question pending under `key`, as `QuestionStore.pending`."""
        return await arun(self._core.pending(key), self._targets)

    async def answer(self, key: str) -> Answer | None:
        """The answer to the question pending under `key`, as `QuestionStore.answer`."""
        return await arun(self._core.answer(key), self._targets)

    async def record(self, key: str) -> tuple[Question, Answer | None] | None:
        """The pending question under `key` with its answer, as `QuestionStore.record`."""
        return await arun(self._core.record(key), self._targets)

    async def provide(
        self,
        key: str,
        question_id: str,
        text: str,
        by: str = "unknown",
        *,
        decision: Decision | str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Answer:
        """Answer the pending question under `key`, as `QuestionStore.provide` (decisions included)."""
        answer = await arun(self._core.provide(key, question_id, text, by, decision, arguments), self._targets)
        if self.notify is not None:
            self.notify.answered(self.identity, key, answer)
        return answer

    async def consume(self, key: str, question_id: str) -> bool:
        """Remove question `question_id` under `key` if still pending, as `QuestionStore.consume`."""
        return await arun(self._core.consume(key, question_id), self._targets)

    def headers(self, prefix: str = "") -> AsyncIterator[Listing]:
        """`async for` the cleartext headers of the question records, as `QuestionStore.headers`."""
        return self._frames.list(prefix)

    def list(self, prefix: str = "") -> AsyncIterator[tuple[Question, Answer | None]]:
        """`async for` every pending question with its answer, as `QuestionStore.list`."""
        listings = self._frames.list(prefix)
        return self._records(listings)

    async def _records(self, listings: AsyncIterator[Listing]) -> AsyncIterator[tuple[Question, Answer | None]]:
        async for listing in listings:
            record = await arun(self._core.listed(listing.key), self._targets)
            if record is not None:
                yield record

    async def sweep(self, now: datetime | None = None) -> int:
        """Remove every question whose run's deadline has passed, as `QuestionStore.sweep`."""
        return await self._frames.sweep(now)


class Coordinator:
    """`berth.Coordinator` awaited: `await suspend(...)`, `await wake(...)`, the same protocol and decisions.

    Safe to share between the tasks of one event loop; any number of coordinators,
    sync or async, in any number of processes, may wake the same keys.
    """

    def __init__(
        self,
        store: AsyncStore,
        questions: Any,
        *,
        default_deadline: timedelta = timedelta(days=14),
        validate: Callable[[Envelope], Any] | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        """Build a coordinator (arguments as `berth.Coordinator`'s; `questions` awaitable, such as
        `berth.aio.open_questions(...)`)."""
        # The sync coordinator holds the checks and the plans; it sees the store's sync twin (for
        # the identity and the clock) and calls neither store: the plans' calls are awaited here.
        self._core = SyncCoordinator(
            store.sync,
            questions,
            default_deadline=default_deadline,
            validate=validate,
            clock=clock,
        )
        self.store = store
        self.questions = questions
        self._targets = {"store": store, "questions": questions}

    def __repr__(self) -> str:
        return f"berth.aio.Coordinator({self.store!r}, {self.questions!r})"

    @property
    def identity(self) -> str:
        """The identity of the envelope store."""
        return self.store.identity

    @property
    def default_deadline(self) -> timedelta:
        """Stamped on envelopes parked without a deadline."""
        deadline: timedelta = self._core.default_deadline
        return deadline

    async def suspend(self, key: str, envelope: Envelope, question: str | None = None) -> Envelope:
        """Park `envelope` under `key`, then ask a human `question` about it, as `berth.Coordinator.suspend`."""
        return await arun(self._core.suspend_plan(key, envelope, question), self._targets)

    async def wake(self, key: str) -> Wake:
        """Decide FRESH, REARM or RESUME for the run parked under `key`, as `berth.Coordinator.wake`."""
        return await arun(self._core.wake_plan(key), self._targets)
