"""The coordinator: suspend a run and ask a human; on each wake, resume it exactly once, wait, or start fresh.

    suspend: check -> stamp the deadline -> save -> ask          (nobody is asked about a run that did not park)
    wake:    load -> dead? -> answered? -> conditional delete -> consume
                      |          |              |
                      FRESH      REARM          REARM (another waker won) / RESUME (this caller won)

The conditional delete of the envelope with the token this caller loaded is
the commit point: exactly one waker's delete succeeds, and only that waker
resumes. Everything after it (consuming the question) is best effort.

`CoordinatorCore` makes every decision of both, as plans, and does no I/O; `berth.aio.AsyncCoordinator`
(berth/_aio_coordinator.py) and `Coordinator` (berth/_coordinator.py, generated from it by
scripts/twin.py) each hold one and run its plans against their stores.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from berth._envelope import ENVELOPE_VERSION, Envelope
from berth._errors import BackendError, BerthError, ConfigDrift, Expired, InvalidEnvelope, TokenMismatch, where
from berth._plan import Plan, commit, role, step
from berth._public import publish
from berth._question_types import Answer, Question
from berth._store import StoreCore, StoreSteps
from berth._token import Token

__all__ = ["QUESTION_LABEL", "AsyncQuestionsLike", "CoordinatorCore", "QuestionsLike", "Wake", "WakeDecision"]

log = logging.getLogger("berth")

QUESTION_LABEL = "berth.question"
"""The label `suspend` stamps on a parked envelope: the id of the question it asked.

A wake resumes only with an answer to that question, never with an answer
left over from an earlier run of the same key.
"""

_MAX_LABELS = 64


class WakeDecision(enum.StrEnum):
    """What a wake decided; the host acts on it (see docs/coordinator.md)."""

    FRESH = "fresh"
    """Nothing is parked (any more): start the run from scratch, or do nothing."""
    REARM = "rearm"
    """Still parked (unanswered, another waker won, or an error): wake again later."""
    RESUME = "resume"
    """This caller claimed the envelope: resume the run with `envelope` and `answer`."""


class _WakeFields(NamedTuple):
    decision: WakeDecision
    envelope: Envelope | None
    answer: Answer | None


class Wake(_WakeFields):
    """`Wake(decision, envelope, answer)`: what `Coordinator.wake` decided.

    `envelope` and `answer` are set only on RESUME. It unpacks and compares as
    that triple; `error` (the berth error behind a REARM, else None) and
    `reason` (a short phrase for logs: "expired", "another waker won", ...) ride along.
    """

    error: BerthError | None
    reason: str

    def __new__(
        cls,
        decision: WakeDecision,
        envelope: Envelope | None = None,
        answer: Answer | None = None,
        *,
        error: BerthError | None = None,
        reason: str = "",
    ) -> Wake:
        self = super().__new__(cls, WakeDecision(decision), envelope, answer)
        self.error = error
        self.reason = reason
        return self

    def __repr__(self) -> str:
        extra = f", error={self.error!r}" if self.error is not None else ""
        run = self.envelope.run_id if self.envelope is not None else None
        answered = self.answer.question_id if self.answer is not None else None  # never the human's text
        return f"Wake({self.decision.name}, run_id={run!r}, answer_to={answered!r}, reason={self.reason!r}{extra})"


@role
class QuestionsLike(Protocol):
    """What the coordinator needs of a question store (`berth.QuestionStore` is one)."""

    def ask(
        self, key: str, prompt: str, *, run_id: str, question_id: str, deadline: datetime | None = None
    ) -> Question:
        """Ask a human `prompt` about the run under `key`, under exactly `question_id`.

        `deadline` is the run's: a question store may retire the question after it.
        """
        ...

    def pending(self, key: str) -> Question | None:
        """The question pending under `key`."""
        ...

    def answer(self, key: str) -> Answer | None:
        """The answer to the question pending under `key`."""
        ...

    def consume(self, key: str, question_id: str) -> bool:
        """Remove question `question_id` under `key` if it is still pending."""
        ...


class AsyncQuestionsLike(Protocol):
    """What `berth.aio.AsyncCoordinator` needs of a question store (`berth.aio.AsyncQuestionStore` is one):
    `QuestionsLike`'s methods, awaited."""

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


class CoordinatorCore:
    """Every decision of suspend and wake, as plans, and no I/O: `Coordinator` and `berth.aio.AsyncCoordinator`
    each hold one (`coordinator.core`) and run its plans against their stores.

    The plans' steps are the envelope store's (`save`, `load`, `remove`) and the question store's
    (`QuestionsLike`); what a plan needs of the envelope store beyond its steps is its core
    (`StoreCore`: the identity, and the hand-back of a claim whose caller was cancelled).
    """

    def __init__(
        self,
        store: StoreCore,
        *,
        default_deadline: timedelta = timedelta(days=14),
        validate: Callable[[Envelope], Any] | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        """Arguments as `berth.Coordinator`'s, with the envelope store's core for the store."""
        if not isinstance(default_deadline, timedelta):
            raise TypeError(f"default_deadline must be a timedelta, got {type(default_deadline).__name__}")
        self.store = store
        self.default_deadline = default_deadline
        self.validate = validate
        self.clock: Callable[[], datetime] = clock or store.clock

    @property
    def identity(self) -> str:
        """The identity of the envelope store."""
        return self.store.identity

    # --- suspend ------------------------------------------------------------------------

    def suspend_plan(self, key: str, envelope: Envelope, question: str | None) -> Plan[Envelope]:
        """Suspend as a plan of store and question-store calls (run by `Coordinator`, awaited by `AsyncCoordinator`)."""
        key = self.store.check_key(key)
        if self.default_deadline < timedelta(0):
            raise InvalidEnvelope(
                f"suspend at {where(self.identity, key)} refused: default_deadline is negative "
                f"({self.default_deadline}); nothing saved, nothing asked",
                identity=self.identity,
                key=key,
            )
        self._check(key, envelope)
        if question is not None and not isinstance(question, str):
            raise TypeError(f"question must be a str or None, got {type(question).__name__}")
        now = self.clock()
        question_id = os.urandom(16).hex()
        labels = dict(envelope.labels)
        labels[QUESTION_LABEL] = question_id
        envelope = envelope.replace(
            deadline=envelope.deadline if envelope.deadline is not None else now + self.default_deadline,
            created_at=envelope.created_at or now,
            labels=labels,
        )
        prompt = question or _prompt_for(envelope)
        yield from step(StoreSteps.save, key, envelope)
        try:
            # The run's deadline goes with the question, so a question store can retire it with its run.
            yield from step(
                QuestionsLike.ask,
                key,
                prompt,
                run_id=envelope.run_id,
                question_id=question_id,
                deadline=envelope.deadline,
            )
        except Exception as exc:
            log.warning(
                "berth: run %r parked at %s but asking failed (%s): wakes rearm until its deadline",
                envelope.run_id,
                where(self.identity, key),
                exc,
            )
            raise
        return envelope

    def _check(self, key: str, envelope: Envelope) -> None:
        def refuse(why: str) -> InvalidEnvelope:
            return InvalidEnvelope(
                f"suspend at {where(self.identity, key)} refused: {why}; nothing saved, nothing asked",
                identity=self.identity,
                key=key,
            )

        if not isinstance(envelope, Envelope):
            raise refuse(f"needs a berth.Envelope, got {type(envelope).__name__}")
        if envelope.version != ENVELOPE_VERSION:
            raise refuse(f"envelope version {envelope.version}, this berth parks version {ENVELOPE_VERSION}")
        if envelope.turn < 0 or envelope.remaining_turns < 0:
            raise refuse("turn and remaining_turns cannot be negative")
        for pending in envelope.pending_calls:
            if not pending.id:
                raise refuse("every pending call needs an id")
        if QUESTION_LABEL not in envelope.labels and len(envelope.labels) >= _MAX_LABELS:
            raise refuse(f"the envelope has {len(envelope.labels)} labels; suspend needs room for one more")

    # --- wake ---------------------------------------------------------------------------

    def wake_plan(self, key: str) -> Plan[Wake]:
        """Wake as a plan of store and question-store calls (run by `Coordinator`, awaited by `AsyncCoordinator`)."""
        key = self.store.check_key(key)
        try:
            parked = yield from step(StoreSteps.load, key, allow_expired=True)
        except BerthError as exc:
            return self._rearm(key, "load failed", exc)
        if parked is None:
            return Wake(WakeDecision.FRESH, reason="nothing parked")
        envelope, token = parked
        try:
            dead = self._dead(envelope)
        except BerthError as exc:
            return self._rearm(key, "validate failed", exc)
        if dead:
            return (yield from self._remove_dead(key, envelope, token, dead))
        try:
            with self._question_store(key, "answer lookup"):
                answer = yield from step(QuestionsLike.answer, key)
        except BerthError as exc:
            return self._rearm(key, "answer lookup failed", exc)
        if answer is None:
            return Wake(WakeDecision.REARM, reason="not answered")
        bound = envelope.labels.get(QUESTION_LABEL)
        if bound is not None and answer.question_id != bound:
            log.info(
                "berth: %s has an answer to question %r, not to the parked run's question %r: rearm",
                where(self.identity, key),
                answer.question_id,
                bound,
            )
            return Wake(WakeDecision.REARM, reason="answer is to another question")
        try:
            # The commit point ("claimed": how it left, for a witness). Cancelled before its outcome is
            # known (berth.aio), the wake stops there: the run is parked again and its question, not yet
            # consumed, still holds the answer, so the next wake resumes it. After it, the run is the
            # caller's: the question is consumed and the wake returns (berth._plan.commit).
            yield from commit(
                step(StoreSteps.remove, key, token, "claimed"),
                undo=lambda _: self.store.handback(key, envelope),
                delivers=True,
            )
        except TokenMismatch:
            return Wake(WakeDecision.REARM, reason="another waker won")
        except BerthError as exc:
            return self._rearm(key, "claim failed", exc)
        yield from self._consume(key, answer.question_id)
        if envelope.deadline is not None and self.clock() > envelope.deadline:
            # The deadline passed between the check and the commit (a slow answer lookup, say):
            # the run is removed and never resumed, as a dead one is.
            return Wake(WakeDecision.FRESH, reason="expired while being claimed")
        return Wake(WakeDecision.RESUME, envelope, answer, reason="claimed")

    def _dead(self, envelope: Envelope) -> str | None:
        if envelope.deadline is not None and self.clock() > envelope.deadline:
            return "expired"
        if self.validate is not None:
            try:
                self.validate(envelope)
            except ConfigDrift:
                return "drifted"
            except Expired:
                return "expired"
        return None

    def _remove_dead(self, key: str, envelope: Envelope, token: Token, why: str) -> Plan[Wake]:
        question_id = envelope.labels.get(QUESTION_LABEL)
        if question_id is None:
            # Parked without the coordinator: read the question before the delete, so a
            # question asked for a run parked after it is never the one consumed.
            try:
                with self._question_store(key, "pending question lookup"):
                    pending = yield from step(QuestionsLike.pending, key)
            except BerthError as exc:
                log.warning("berth: cannot read the question of a dead run at %s: %s", where(self.identity, key), exc)
                pending = None
            if pending is not None and pending.run_id == envelope.run_id:
                question_id = pending.id
        try:
            yield from step(StoreSteps.remove, key, token, why)  # expired or drifted, for a witness
        except TokenMismatch:
            return Wake(WakeDecision.FRESH, reason=f"{why}; removed by another waker")
        except BerthError as exc:
            return self._rearm(key, f"{why}; removing it failed", exc)
        if question_id is not None:
            yield from self._consume(key, question_id)
        return Wake(WakeDecision.FRESH, reason=why)

    @contextmanager
    def _question_store(self, key: str, what: str) -> Iterator[None]:
        # berth's question store raises berth errors; a host's own may raise anything.
        try:
            yield
        except BerthError:
            raise
        except Exception as exc:
            raise BackendError(
                f"{what} failed at {where(self.identity, key)}: {type(exc).__name__}: {exc}",
                identity=self.identity,
                key=key,
            ) from exc

    def _consume(self, key: str, question_id: str) -> Plan[None]:
        try:
            yield from step(QuestionsLike.consume, key, question_id)
        except Exception as exc:  # past the commit point: log, never raise
            log.warning(
                "berth: could not consume question %r at %s (it stays until swept): %s",
                question_id,
                where(self.identity, key),
                exc,
            )

    def _rearm(self, key: str, why: str, exc: BerthError) -> Wake:
        log.warning("berth: wake at %s rearms: %s: %s", where(self.identity, key), why, exc)
        return Wake(WakeDecision.REARM, error=exc, reason=why)


def _prompt_for(envelope: Envelope) -> str:
    for pending in envelope.pending_calls:
        try:
            value = pending.input_value()
        except ValueError:
            continue
        if isinstance(value, dict):
            prompt = value.get("question")
            if isinstance(prompt, str) and prompt.strip():
                return prompt
    sentence = (
        f"Run {envelope.run_id!r} is waiting for an answer." if envelope.run_id else "A run is waiting for an answer."
    )
    return f"{sentence} Reason: {envelope.reason}." if envelope.reason else sentence


publish(globals())  # its public names read as berth.X
