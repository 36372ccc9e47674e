"""`berth.aio.AsyncCoordinator`: suspend and wake, awaited (`berth.aio.Coordinator` is the same class).

It awaits the plans (`berth._plan`) of the coordinator's protocol -- suspend and wake, written once
as generators of store and question-store steps -- against an `AsyncStore` and an async question store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from berth._aio_store import AsyncStore
from berth._coordinator import Coordinator as SyncCoordinator
from berth._coordinator import Wake
from berth._envelope import Envelope
from berth._plan import arun
from berth._question_types import Answer, Question

__all__ = ["AsyncCoordinator", "AsyncQuestionsLike", "Coordinator"]


class AsyncQuestionsLike(Protocol):
    """What the async coordinator needs of a question store (`berth.aio.AsyncQuestionStore` is one):
    `berth.QuestionsLike`'s methods, awaited."""

    async def ask(
        self, key: str, prompt: str, *, run_id: str, question_id: str, deadline: datetime | None = None
    ) -> Question:
        """Ask a human `prompt` about the run under `key`, under exactly `question_id`."""
        ...

    async def pending(self, key: str) -> Question | None:
        """The question pending under `key`."""
        ...

    async def answer(self, key: str) -> Answer | None:
        """The answer to the question pending under `key`."""
        ...

    async def consume(self, key: str, question_id: str) -> bool:
        """Remove question `question_id` under `key` if it is still pending."""
        ...


class AsyncCoordinator:
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
        return f"berth.aio.AsyncCoordinator({self.store!r}, {self.questions!r})"

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


Coordinator = AsyncCoordinator
"""The async coordinator's first name, kept working as an alias (docs/CHANGELOG.md: prefer `AsyncCoordinator`)."""
