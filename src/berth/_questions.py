"""The question store: what a parked run asks a human, and the human's answer.

Questions live in the same backends as envelopes, under backend names
`{identity}:questions/{key}`. An identity cannot contain ':', so no envelope
name (`{identity}/{key}`) can ever be a question's name, whatever the key.

Each key holds at most one question record: the question and, once a human
gave it, its answer. A record is a frame exactly like an envelope's (same
header, same sealer, same associated data) whose frame identity is
`{identity}:questions`, so a question frame copied over an envelope, or to
another key, does not open. With a real sealer the prompt and the answer are
sealed at rest; with `PlaintextSealer` (the default) they are stored readable.

Every change is a compare-and-swap on the record's generation: an answer is
attached only if the record still holds the question it names, so a human
answering while a new question supersedes the old one is refused, never
attached to the wrong question.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from berth._envelope import Envelope
from berth._errors import BackendError, FormatError, IntegrityError, InvalidKey, TokenMismatch, where
from berth._keys import validate_identity, validate_key
from berth._plan import Plan, call, run
from berth._public import publish
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, Listing, Store
from berth._time import utcnow
from berth._token import Token
from berth.backends import Backend, open_backend

__all__ = ["NAMESPACE", "Answer", "AnswerRefused", "Question", "QuestionCore", "QuestionStore", "open_questions"]

log = logging.getLogger("berth")

NAMESPACE = "questions"
"""The question store's namespace: its frames are the identity `pr-bot:questions` (`pr-bot:questions/org/repo#42`)."""

_RECORD_VERSION = 1
_RECORD_PROVIDER = "berth.questions"
_RETRIES = 16  # each retry follows a concurrent change, and every change ends the loop


@dataclass(frozen=True, slots=True)
class Question:
    """A question a parked run asks a human: `id` is what an answer must name."""

    id: str
    key: str
    run_id: str
    prompt: str
    asked_at: datetime

    def __repr__(self) -> str:
        # The prompt is sealed at rest: its size only, so a log line or a traceback does not carry it.
        return (
            f"Question(id={self.id!r}, key={self.key!r}, run_id={self.run_id!r}, "
            f"prompt=<{len(self.prompt)} chars>, asked_at={self.asked_at!r})"
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """A human's answer to one question, with who gave it and when."""

    question_id: str
    text: str
    by: str
    answered_at: datetime

    def __repr__(self) -> str:
        # The answer is sealed at rest: its size only, so a log line or a traceback does not carry it.
        return (
            f"Answer(question_id={self.question_id!r}, text=<{len(self.text)} chars>, by={self.by!r}, "
            f"answered_at={self.answered_at!r})"
        )


class AnswerRefused(TokenMismatch):
    """An answer that cannot be attached: its question was superseded, consumed, or already answered.

    A `TokenMismatch` because a question id is the human's compare-and-swap
    handle: it no longer names what is pending. Carries `question_id` (the one
    the answer named) and `pending_id` (the question pending now, or None).
    """

    def __init__(
        self,
        message: str,
        *,
        identity: str | None = None,
        key: str | None = None,
        question_id: str | None = None,
        pending_id: str | None = None,
    ):
        super().__init__(message, identity=identity, key=key)
        self.question_id = question_id
        self.pending_id = pending_id


class _WireQuestion(msgspec.Struct):
    id: str
    run_id: str
    prompt: str
    asked_at: datetime


class _WireAnswer(msgspec.Struct):
    text: str
    by: str
    answered_at: datetime


class _WireRecord(msgspec.Struct):
    v: int
    question: _WireQuestion
    answer: _WireAnswer | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_WireRecord)


@dataclass(frozen=True, slots=True)
class _Record:
    question: Question
    answer: Answer | None
    deadline: datetime | None
    token: Token


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


class QuestionCore:
    """Every decision the question store makes, as plans: shared by `QuestionStore` and `berth.aio.AsyncQuestionStore`.

    Key and argument checks (before any I/O), the record's wire format, the
    compare-and-swap loops of `provide` and `consume`, and the messages of every
    error. Each method returns a plan (`berth._plan`) over one role, "frames": the
    namespace's `Store`, which `QuestionStore` runs it against, or its `AsyncStore`,
    which `AsyncQuestionStore` awaits it against. A store holds one (`questions.core`).
    """

    def __init__(self, *, identity: str, clock: Callable[[], datetime] | None = None):
        self.identity = validate_identity(identity)
        self.clock = clock or utcnow

    # --- records -------------------------------------------------------------------------

    def _key(self, key: object) -> str:
        return validate_key(key, self.identity)

    def _read(self, key: str) -> Plan[_Record | None]:
        """Read the record under `key` (already checked)."""
        parked = yield call("frames", "load", key, allow_expired=True)
        return self._record(key, parked)

    def _record(self, key: str, parked: Any) -> _Record | None:
        if parked is None:
            return None
        env, token = parked
        try:
            wire = _decoder.decode(env.provider_state)
        except (msgspec.DecodeError, msgspec.ValidationError):
            wire = None
        if wire is None or env.provider != _RECORD_PROVIDER or wire.v != _RECORD_VERSION:
            raise FormatError(
                f"question record at {where(self.identity, key)} is not one this berth reads",
                identity=self.identity,
                key=key,
            )
        q = wire.question
        question = Question(q.id, key, q.run_id, q.prompt, q.asked_at)
        a = wire.answer
        answer = None if a is None else Answer(q.id, a.text, a.by, a.answered_at)
        return _Record(question, answer, env.deadline, token)

    @staticmethod
    def _envelope(question: Question, answer: Answer | None, deadline: datetime | None) -> Envelope:
        wire = _WireRecord(
            _RECORD_VERSION,
            _WireQuestion(question.id, question.run_id, question.prompt, question.asked_at),
            None if answer is None else _WireAnswer(answer.text, answer.by, answer.answered_at),
        )
        return Envelope(
            provider=_RECORD_PROVIDER,
            provider_state=_encoder.encode(wire),
            run_id=question.run_id,
            reason="answered" if answer is not None else "asked",
            deadline=deadline,
            created_at=question.asked_at,
        )

    # --- the protocol, as plans --------------------------------------------------------------

    def ask(
        self, key: str, prompt: str, run_id: str, question_id: str | None, deadline: datetime | None
    ) -> Plan[Question]:
        """`QuestionStore.ask` as a plan: every argument checked before its one save."""
        key = self._key(key)
        _text(prompt, "prompt")
        _text(run_id, "run_id")
        if question_id is None:
            question_id = os.urandom(16).hex()
        elif not _text(question_id, "question_id"):
            raise InvalidKey(f"empty question id at {where(self.identity, key)}", identity=self.identity, key=key)
        question = Question(question_id, key, run_id, prompt, self.clock())
        yield call("frames", "save", key, self._envelope(question, None, deadline))
        return question

    def pending(self, key: str) -> Plan[Question | None]:
        """`QuestionStore.pending` as a plan."""
        record = yield from self._read(self._key(key))
        return None if record is None else record.question

    def answer(self, key: str) -> Plan[Answer | None]:
        """`QuestionStore.answer` as a plan."""
        record = yield from self._read(self._key(key))
        return None if record is None else record.answer

    def record(self, key: str) -> Plan[tuple[Question, Answer | None] | None]:
        """`QuestionStore.record` as a plan."""
        record = yield from self._read(self._key(key))
        return None if record is None else (record.question, record.answer)

    def listed(self, key: str) -> Plan[tuple[Question, Answer | None] | None]:
        """The record of a key a listing found: None if it is gone, or does not open (skipped and logged)."""
        try:
            record = yield from self._read(key)
        except (FormatError, IntegrityError) as exc:
            log.warning("berth: skipping unreadable question record: %s", exc)
            return None
        return None if record is None else (record.question, record.answer)

    def provide(self, key: str, question_id: str, text: str, by: str) -> Plan[Answer]:
        """`QuestionStore.provide` as a plan: read, decide, save if unchanged since read; again on a lost race."""
        key = self._key(key)
        _text(question_id, "question_id")
        _text(text, "text")
        _text(by, "by")
        for _ in range(_RETRIES):
            record = yield from self._read(key)
            if record is None:
                raise AnswerRefused(
                    f"no question is pending at {where(self.identity, key)}: "
                    f"question {question_id!r} was consumed or never asked",
                    identity=self.identity,
                    key=key,
                    question_id=question_id,
                )
            pending = record.question
            if pending.id != question_id:
                raise AnswerRefused(
                    f"question {question_id!r} at {where(self.identity, key)} is not the pending one: "
                    f"it was superseded by question {pending.id!r}",
                    identity=self.identity,
                    key=key,
                    question_id=question_id,
                    pending_id=pending.id,
                )
            if record.answer is not None:
                if record.answer.text == text and record.answer.by == by:
                    return record.answer
                raise AnswerRefused(
                    f"question {question_id!r} at {where(self.identity, key)} was already answered "
                    f"by {record.answer.by!r} at {record.answer.answered_at.isoformat()}",
                    identity=self.identity,
                    key=key,
                    question_id=question_id,
                    pending_id=pending.id,
                )
            answer = Answer(question_id, text, by, self.clock())
            try:
                yield call(
                    "frames", "save", key, self._envelope(pending, answer, record.deadline), if_match=record.token
                )
            except TokenMismatch:
                continue  # changed since read: re-read and decide again
            return answer
        raise BackendError(
            f"answer at {where(self.identity, key)} kept losing to concurrent writers", identity=self.identity, key=key
        )

    def consume(self, key: str, question_id: str) -> Plan[bool]:
        """`QuestionStore.consume` as a plan: delete with the token read, again on a lost race."""
        key = self._key(key)
        _text(question_id, "question_id")
        for _ in range(_RETRIES):
            record = yield from self._read(key)
            if record is None or record.question.id != question_id:
                return False
            try:
                yield call("frames", "delete", key, record.token)
            except TokenMismatch:
                continue
            return True
        raise BackendError(
            f"consume at {where(self.identity, key)} kept losing to concurrent writers",
            identity=self.identity,
            key=key,
        )


class QuestionStore:
    """Questions and answers for the parked runs of one identity, in one backend.

    Safe to share between threads; every backend is safe to share between
    processes. Open one with `berth.open_questions(url, identity=...)`, or wrap a
    backend: `QuestionStore(backend, identity="pr-bot", sealer=...)` (the same
    backend object an envelope `Store` uses is fine: the namespaces never meet).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        identity: str,
        sealer: Sealer | None = None,
        accept_plaintext: bool = False,
        max_record_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        clock: Callable[[], datetime] | None = None,
    ):
        self.core = QuestionCore(identity=identity, clock=clock)
        """Every decision this store makes, as plans (shared with `berth.aio.AsyncQuestionStore`)."""
        self.identity = self.core.identity
        self._frames = Store(
            backend,
            identity=identity,
            sealer=sealer,
            accept_plaintext=accept_plaintext,
            max_envelope_bytes=max_record_bytes,
            clock=clock,
            namespace=NAMESPACE,
        )
        self._targets = {"frames": self._frames}

    def __repr__(self) -> str:
        return (
            f"QuestionStore({type(self._frames.backend).__name__}, identity={self.identity!r}, "
            f"sealer={self._frames.sealer!r})"
        )

    def __enter__(self) -> QuestionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def backend(self) -> Backend:
        """The backend the records live in."""
        return self._frames.backend

    def close(self) -> None:
        """Release the backend's connections."""
        self._frames.close()

    def now(self) -> datetime:
        """The store's clock (injectable for tests)."""
        return self.core.clock()

    # --- the protocol ----------------------------------------------------------------------

    def ask(
        self,
        key: str,
        prompt: str,
        *,
        run_id: str = "",
        question_id: str | None = None,
        deadline: datetime | None = None,
    ) -> Question:
        """Ask a human `prompt` about the run parked under `key`, superseding any earlier question.

        Args:
            key: the parked run's key.
            prompt: what the human is asked (sealed at rest with a real sealer).
            run_id: the parked run's id, so a question can be told apart from an earlier run's.
            question_id: the id an answer must name; a fresh 128-bit random id when None.
            deadline: the run's deadline; `sweep` removes questions past it.

        Returns:
            The question as stored.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            TypeError: `prompt`, `run_id` or `question_id` is not a str.
            BackendError: the write failed; an earlier question, if any, may still be pending.
        """
        return run(self.core.ask(key, prompt, run_id, question_id, deadline), self._targets)

    def pending(self, key: str) -> Question | None:
        """The question the run parked under `key` waits on: asked and not yet consumed.

        A question stays pending once answered, until the waker that resumes the
        run (or removes it as dead) consumes it; see `answer`.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            IntegrityError, FormatError: the record does not open.
            BackendError: the backend failed.
        """
        return run(self.core.pending(key), self._targets)

    def answer(self, key: str) -> Answer | None:
        """The answer to the pending question under `key`, or None while it is unanswered.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            IntegrityError, FormatError: the record does not open.
            BackendError: the backend failed.
        """
        return run(self.core.answer(key), self._targets)

    def record(self, key: str) -> tuple[Question, Answer | None] | None:
        """The pending question under `key` with its answer (None while unanswered), in one read; None if none.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            IntegrityError, FormatError: the record does not open.
            BackendError: the backend failed.
        """
        return run(self.core.record(key), self._targets)

    def headers(self, prefix: str = "") -> Iterator[Listing]:
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

    def provide(self, key: str, question_id: str, text: str, by: str = "unknown") -> Answer:
        """Answer the pending question under `key` (the human's side).

        The first answer to a question is the one the run resumes with. Repeating
        exactly that answer (same text, same `by`) returns it again, so a retry
        after a `BackendError` is safe.

        Args:
            key: the parked run's key.
            question_id: the id of the question being answered.
            text: the answer (sealed at rest with a real sealer).
            by: who answered, recorded with the answer.

        Returns:
            The answer as stored, with `answered_at`.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            TypeError: `question_id`, `text` or `by` is not a str.
            AnswerRefused: `question_id` is not the pending question (superseded by a newer
                one, consumed, or never asked), or it was already answered differently.
            BackendError: the backend failed; the answer may or may not be stored.
        """
        return run(self.core.provide(key, question_id, text, by), self._targets)

    def consume(self, key: str, question_id: str) -> bool:
        """Remove question `question_id` (and its answer) under `key`, if it is still the pending one.

        A newer question under the same key is left alone.

        Returns:
            True if this call removed it; False if it was not pending (already consumed,
            superseded, or never asked).

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            BackendError: the backend failed.
        """
        return run(self.core.consume(key, question_id), self._targets)

    def list(self, prefix: str = "") -> Iterator[tuple[Question, Answer | None]]:
        """Stream every pending question under keys starting with `prefix`, each with its answer or None.

        Needs the sealer's keys (prompts are sealed). A record that does not open
        is skipped and logged.

        Raises:
            InvalidKey: a malformed prefix (before any I/O).
            BackendError: the backend failed.
        """
        for listing in self._frames.list(prefix):
            record = run(self.core.listed(listing.key), self._targets)
            if record is not None:
                yield record

    def sweep(self, now: datetime | None = None) -> int:
        """Remove every question whose run's deadline has passed, each only if unchanged since read.

        Returns:
            How many questions were removed.
        """
        return self._frames.sweep(now)


def open_questions(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    clock: Callable[[], datetime] | None = None,
    **options: Any,
) -> QuestionStore:
    """Open the question store at `url`: the same schemes and backends as `open_store`.

    Args:
        url: memory://, file:///dir, sqlite:///file.db, postgresql://, redis://, gs://, s3://.
        identity: the namespace of one agent, tenant or service (as its envelope store's).
        sealer: seals prompts and answers; None stores them readable (development only).
        accept_plaintext: let a sealed store read plaintext records.
        clock: returns "now" as an aware datetime (tests inject one).
        **options: passed to the backend.

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    validate_identity(identity)
    backend = open_backend(url, **options)
    return QuestionStore(backend, identity=identity, sealer=sealer, accept_plaintext=accept_plaintext, clock=clock)


publish(globals())  # its public names read as berth.X
