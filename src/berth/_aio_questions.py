"""`AsyncQuestionStore` and `open_questions`, awaited: the question store's I/O around `QuestionCore`.

Every decision (checks, the record's format, the compare-and-swap loops, the
messages) is `berth._question_core.QuestionCore`'s, as plans; this shell runs them
against the namespace's store of records and tells a webhook what happened.
The sync `berth.QuestionStore` (`berth._questions`) is generated from this
module by scripts/twin.py: change this one and run the script.
"""  # twin: sync """`QuestionStore` and `open_questions`: the question store's I/O around `QuestionCore`."""

from __future__ import annotations

import asyncio  # twin: async-only
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from berth._aio_open import open_backend  # twin: sync from berth.backends import Backend, open_backend
from berth._aio_store import AsyncStore
from berth._keys import validate_identity
from berth._notify import Webhook, as_webhook
from berth._observe import instrument
from berth._plan import arun

# twin: sync from berth._public import publish
from berth._question_core import NAMESPACE, QuestionCore
from berth._question_types import Answer, Decision, Question, ToolRequest
from berth._questions import QuestionStore  # twin: async-only
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, Listing, StoreSteps
from berth.backends._aio import DEFAULT_MAX_THREADS, AsyncBackend, sync_twin  # twin: async-only

__all__ = ["AsyncQuestionStore", "open_questions"]


class AsyncQuestionStore:
    """Questions and answers for the parked runs of one identity, in one backend.

    Open one with `berth.aio.open_questions(url, identity=...)`, or wrap a backend:
    `AsyncQuestionStore(backend, identity="pr-bot", sealer=...)` (the backend an envelope
    store uses is fine: the namespaces never meet). Safe to share; every backend is safe to
    share between processes, and a sync and an async question store over the same backend
    see the same questions.
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
        """Wrap a backend.

        Args:
            backend: where the records live (the envelope store's own backend is fine).
            identity: the namespace of one agent, tenant or service (as its envelope store's).
            sealer: seals prompts and answers; None stores them readable (development only).
            accept_plaintext: let a sealed store read plaintext records.
            max_record_bytes: the largest record written.
            clock: returns "now" as an aware datetime (tests inject one).
            notify: a `berth.Webhook` told of every question asked and answer given.
        """
        self.core = QuestionCore(identity=identity, clock=clock)
        """Every decision this store makes, as plans (one core class serves the sync and the async store)."""
        self.identity = self.core.identity
        self._options: dict[str, Any] = {
            "identity": identity,
            "sealer": sealer,
            "accept_plaintext": accept_plaintext,
            "max_record_bytes": max_record_bytes,
            "clock": clock,
        }  # twin: async-only
        self._sync: QuestionStore | None = None  # twin: async-only
        self._frames = AsyncStore(
            backend,
            identity=identity,
            sealer=sealer,
            accept_plaintext=accept_plaintext,
            max_envelope_bytes=max_record_bytes,
            clock=clock,
            namespace=NAMESPACE,
        )
        self._targets = {StoreSteps: self._frames.steps}
        self.notify = as_webhook(notify)
        """Told of every question asked and answer given through this store (None: nobody is told)."""
        instrument(self, "questions", identity=self.identity, backend=backend)

    def __repr__(self) -> str:
        return (
            f"AsyncQuestionStore({type(self._frames.backend).__name__}, identity={self.identity!r}, "
            f"sealer={self._frames.sealer!r})"
        )

    async def __aenter__(self) -> AsyncQuestionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def backend(self) -> AsyncBackend:
        """The backend the records live in."""
        return self._frames.backend

    # twin: async-only
    @property
    def sync(self) -> QuestionStore:
        """A sync `QuestionStore` over the same backend, sealer and webhook (made on first use)."""
        if self._sync is None:
            self._sync = QuestionStore(sync_twin(self.backend), notify=self.notify, **self._options)
        return self._sync

    # twin: end
    async def aclose(self) -> None:
        """Release the backend's connections; with `notify`, first wait up to its `close_timeout` for its queue."""
        if self.notify is not None:
            await asyncio.to_thread(
                self.notify.flush, self.notify.close_timeout
            )  # twin: sync self.notify.flush(self.notify.close_timeout)
        await self._frames.aclose()

    def now(self) -> datetime:
        """The store's clock (injectable for tests)."""
        return self.core.clock()

    # --- the protocol ----------------------------------------------------------------------

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
        """Ask a human `prompt` about the run parked under `key`, superseding any earlier question.

        Args:
            key: the parked run's key.
            prompt: what the human is asked (sealed at rest with a real sealer).
            run_id: the parked run's id, so a question can be told apart from an earlier run's.
            question_id: the id an answer must name; a fresh 128-bit random id when None.
            deadline: the run's deadline; `sweep` removes questions past it.
            accepts: the decisions an answer may make (`berth.Decision` or their names);
                empty: a free-text response only.
            tool: for a tool approval, the call (sealed at rest like the prompt).

        Returns:
            The question as stored.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            InvalidAnswer: an unknown decision in `accepts`, or `edit` without a `tool` (before any I/O).
            TypeError: `prompt`, `run_id` or `question_id` is not a str, `tool` not a `ToolRequest`.
            BackendError: the write failed; an earlier question, if any, may still be pending.
        """
        question = await arun(self.core.ask(key, prompt, run_id, question_id, deadline, accepts, tool), self._targets)
        if self.notify is not None:
            self.notify.asked(self.identity, question, deadline)  # queued: never waits, never raises
        return question

    async def pending(self, key: str) -> Question | None:
        """The question the run parked under `key` waits on: asked and not yet consumed.

        A question stays pending once answered, until the waker that resumes the
        run (or removes it as dead) consumes it; see `answer`.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            IntegrityError, FormatError: the record does not open.
            BackendError: the backend failed.
        """
        return await arun(self.core.pending(key), self._targets)

    async def answer(self, key: str) -> Answer | None:
        """The answer to the pending question under `key`, or None while it is unanswered.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            IntegrityError, FormatError: the record does not open.
            BackendError: the backend failed.
        """
        return await arun(self.core.answer(key), self._targets)

    async def record(self, key: str) -> tuple[Question, Answer | None] | None:
        """The pending question under `key` with its answer (None while unanswered), in one read; None if none.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            IntegrityError, FormatError: the record does not open.
            BackendError: the backend failed.
        """
        return await arun(self.core.record(key), self._targets)

    def headers(self, prefix: str = "") -> AsyncIterator[Listing]:
        """Stream the cleartext headers of the question records under `prefix`, without opening them.

        Each `Listing` has the key, run id, `created_at` (when the question was
        asked), the run's deadline and the record's token, which changes with
        every new question or answer. Needs no keys: the prompt and the answer
        stay sealed.

        Raises:
            InvalidKey: a malformed prefix (before any I/O).
            BackendError: the backend failed.
        """
        return self._frames.list(prefix)

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
        """Answer the pending question under `key` (the human's side).

        The first answer to a question is the one the run resumes with. Repeating
        exactly that answer (same decision, text, arguments and `by`) returns it
        again, so a retry after a `BackendError` is safe.

        Args:
            key: the parked run's key.
            question_id: the id of the question being answered.
            text: the answer, or the reason or note of a decision (sealed at rest with a real sealer).
            by: who answered, recorded with the answer.
            decision: the decision made; None reads it from `text` (`read_text`: only exactly
                an approval approves; other text to an approval question is a response where one
                is accepted, else a rejection whose reason is the text).
            arguments: the new arguments of an `edit`: a JSON object (only with `edit`).

        Returns:
            The answer as stored, with its `decision` and `answered_at`.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            TypeError: `question_id`, `text` or `by` is not a str.
            InvalidAnswer: an unknown decision, `edit` without a JSON object of arguments, or
                arguments without `edit` (before any I/O); a decision the question does not
                accept (nothing recorded).
            AnswerRefused: `question_id` is not the pending question (superseded by a newer
                one, consumed, or never asked), or it was already answered differently.
            BackendError: the backend failed; the answer may or may not be stored.
        """
        answer = await arun(self.core.provide(key, question_id, text, by, decision, arguments), self._targets)
        if self.notify is not None:
            self.notify.answered(self.identity, key, answer)
        return answer

    async def consume(self, key: str, question_id: str) -> bool:
        """Remove question `question_id` (and its answer) under `key`, if it is still the pending one.

        A newer question under the same key is left alone.

        Returns:
            True if this call removed it; False if it was not pending (already consumed,
            superseded, or never asked).

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            BackendError: the backend failed.
        """
        return await arun(self.core.consume(key, question_id), self._targets)

    def list(self, prefix: str = "") -> AsyncIterator[tuple[Question, Answer | None]]:
        """Stream every pending question under keys starting with `prefix`, each with its answer or None.

        Needs the sealer's keys (prompts are sealed). A record that does not open
        is skipped and logged.

        Raises:
            InvalidKey: a malformed prefix (here, before any I/O).
            BackendError: the backend failed.
        """
        return self._records(self._frames.list(prefix))

    async def _records(self, listings: AsyncIterator[Listing]) -> AsyncIterator[tuple[Question, Answer | None]]:
        async for listing in listings:
            record = await arun(self.core.listed(listing.key), self._targets)
            if record is not None:
                yield record

    async def sweep(self, now: datetime | None = None) -> int:
        """Remove every question whose run's deadline has passed, each only if unchanged since read.

        Returns:
            How many questions were removed.
        """
        return await self._frames.sweep(now)


def open_questions(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    clock: Callable[[], datetime] | None = None,
    max_threads: int = DEFAULT_MAX_THREADS,  # twin: async-only
    notify: Webhook | None = None,
    **options: Any,
) -> AsyncQuestionStore:
    """Open the question store at `url`: the same schemes and backends as `open_store`.

    Args:
        url: memory://, file:///dir, sqlite:////abs/file.db, postgresql://, redis://, gs://, s3://.
        identity: the namespace of one agent, tenant or service (as its envelope store's).
        sealer: seals prompts and answers; None stores them readable (development only).
        accept_plaintext: let a sealed store read plaintext records.
        clock: returns "now" as an aware datetime (tests inject one).
        notify: a `berth.Webhook` told of every question asked and answer given through this store
            (queued and sent by the webhook's own threads: a park never waits on it; docs/notifications.md).
        **options: passed to the backend (`berth.aio`'s open also takes `max_threads`: the worker
            threads of a backend whose client blocks).

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        TypeError: `notify` is not a `berth.Webhook` (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    validate_identity(identity)
    as_webhook(notify)
    backend = open_backend(url, max_threads=max_threads, **options)  # twin: sync backend = open_backend(url, **options)
    return AsyncQuestionStore(
        backend, identity=identity, sealer=sealer, accept_plaintext=accept_plaintext, clock=clock, notify=notify
    )


# twin: sync publish(globals())  # its public names read as berth.X
