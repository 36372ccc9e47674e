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

Decisions. A question may declare the decisions it accepts (`Decision`: approve,
reject, edit, respond, ignore, as LangChain's Agent Inbox offers them) and, for a
tool approval, the call (`ToolRequest`: name, arguments as a JSON object, the
agent, a description, the call id). An answer records the decision made, its
text (a reason, a note, a response) and, for an edit, the new arguments. A plain
text answer (no decision named) to a question that accepts `approve` approves
only when it is exactly an approval (`approve`, `yes`, `ok`, ...); `reject` or
`reject: <reason>` rejects; anything else is a response where one is accepted,
else a rejection whose reason is the text: free text never approves.

The record's wire format: `{"v": 1, "question": {"id", "run_id", "prompt",
"asked_at", "accepts"?, "tool"?}, "answer": {"text", "by", "answered_at",
"decision"?, "arguments"?} | null}`; the fields marked ? are written only when
set, so a record without decisions is byte for byte what earlier versions wrote,
and their records read as questions that accept a free-text response.
"""

from __future__ import annotations

import enum
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

import msgspec

from berth._envelope import Envelope
from berth._errors import BackendError, BerthError, FormatError, IntegrityError, InvalidKey, TokenMismatch, where
from berth._keys import validate_identity, validate_key
from berth._notify import Webhook, as_webhook
from berth._plan import Plan, call, run
from berth._public import publish
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, Listing, Store
from berth._time import utcnow
from berth._token import Token
from berth.backends import Backend, open_backend

__all__ = [
    "APPROVALS",
    "NAMESPACE",
    "Answer",
    "AnswerRefused",
    "Decision",
    "InvalidAnswer",
    "Question",
    "QuestionCore",
    "QuestionStore",
    "ToolRequest",
    "is_approval",
    "open_questions",
    "read_text",
]

log = logging.getLogger("berth")

NAMESPACE = "questions"
"""The question store's namespace: its frames are the identity `pr-bot:questions` (`pr-bot:questions/org/repo#42`)."""

_RECORD_VERSION = 1
_RECORD_PROVIDER = "berth.questions"
_RETRIES = 16  # each retry follows a concurrent change, and every change ends the loop


class Decision(enum.StrEnum):
    """What a human decided about a question (the decisions of LangChain's Agent Inbox)."""

    APPROVE = "approve"
    """Run the tool call as asked; the answer's text, if any, is a note."""
    REJECT = "reject"
    """Do not run it; the answer's text is the reason, fed back to the model."""
    EDIT = "edit"
    """Run it with the answer's `arguments` instead of the asked ones."""
    RESPOND = "respond"
    """A free-text answer (the result of an external call, or a reply to the model)."""
    IGNORE = "ignore"
    """Dismiss the question: nothing runs."""


APPROVALS = frozenset({"approve", "approved", "yes", "y", "ok", "okay", "allow", "allowed", "lgtm"})
"""The answers that are exactly an approval (compared trimmed, case-folded, without a final `.` or `!`)."""

_REJECTIONS = frozenset({"reject", "rejected", "deny", "denied", "no", "n"})
_REJECTION = re.compile(r"(\w+)[.!]?(?:\s*[:\-\u2013\u2014,]\s*(.*))?", re.DOTALL)  # `no`, `reject: why`, `No - why`


def is_approval(text: str) -> bool:
    """Whether `text` is exactly an approval (`approve`, `yes`, `ok`, ... and nothing else): see `APPROVALS`."""
    return text.strip().rstrip(".!").strip().casefold() in APPROVALS


def read_text(text: str, accepts: Iterable[Decision]) -> tuple[Decision, str]:
    """The decision a plain-text answer makes, given what its question accepts: `(decision, text)`.

    Exactly an approval approves (where `approve` is accepted); `reject`, `no`, ... alone, or
    followed by `:` (or `-`, `,`) and a reason, reject with that reason (where `reject` is accepted); anything
    else is a response where `respond` is accepted, else a rejection whose reason is the whole
    text. Free text never approves.
    """
    accepted = set(accepts) or {Decision.RESPOND}
    body = text.strip()
    if Decision.APPROVE in accepted and is_approval(body):
        return Decision.APPROVE, ""
    if Decision.REJECT in accepted:
        said = _REJECTION.fullmatch(body)
        if said is not None and said[1].casefold() in _REJECTIONS:
            return Decision.REJECT, (said[2] or "").strip()
    if Decision.RESPOND in accepted:
        return Decision.RESPOND, text
    if Decision.REJECT in accepted:
        return Decision.REJECT, body
    return Decision.IGNORE, body  # accepts neither: the answer decides nothing (refused by `provide`)


def _decision(value: object) -> Decision | None:
    """`value` as a `Decision` (a member, or its name as a str), or None."""
    if isinstance(value, Decision):
        return value
    if isinstance(value, str):
        try:
            return Decision(value)
        except ValueError:
            return None
    return None


def _json_value(value: object, depth: int = 0) -> Any:
    """A copy of `value` made of JSON values only (dicts with str keys, lists, str, finite numbers, bools, None)."""
    if depth > 64:
        raise TypeError("nested deeper than 64 levels")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError("NaN and infinities are not JSON")
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"object keys must be str, got {type(k).__name__}")
            out[k] = _json_value(v, depth + 1)
        return out
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _json_object(value: object, what: str) -> dict[str, Any]:
    """A deep, JSON-only copy of `value`, which must be a JSON object (TypeError otherwise)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a JSON object (a dict), got {type(value).__name__}")
    try:
        copied: dict[str, Any] = _json_value(value)
    except TypeError as exc:
        raise TypeError(f"{what} must hold JSON values only: {exc}") from None
    return copied


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """The tool call an approval question is about: what would run if a human approves.

    `arguments` is a JSON object (a read-only copy of what was given); `call_id` is the
    framework's id of the call, which binds an answer to exactly this call.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    agent: str = ""
    description: str = ""
    call_id: str = ""

    def __post_init__(self) -> None:
        for what in ("name", "agent", "description", "call_id"):
            _text(getattr(self, what), f"ToolRequest.{what}")
        if not self.name:
            raise ValueError("ToolRequest.name cannot be empty")
        object.__setattr__(self, "arguments", MappingProxyType(_json_object(self.arguments, "ToolRequest.arguments")))

    def __repr__(self) -> str:
        # Arguments are sealed at rest like the prompt: their names only.
        return (
            f"ToolRequest(name={self.name!r}, arguments=<{', '.join(self.arguments)}>, agent={self.agent!r}, "
            f"call_id={self.call_id!r})"
        )


@dataclass(frozen=True, slots=True)
class Question:
    """A question a parked run asks a human: `id` is what an answer must name.

    `accepts` lists the decisions an answer may make (empty: a free-text response only,
    as every question berth asked before decisions); `tool` is the call a tool approval is about.
    """

    id: str
    key: str
    run_id: str
    prompt: str
    asked_at: datetime
    accepts: tuple[Decision, ...] = ()
    tool: ToolRequest | None = None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """The decisions an answer may make: `accepts`, or `(Decision.RESPOND,)` when none is declared."""
        return self.accepts or (Decision.RESPOND,)

    def __repr__(self) -> str:
        # The prompt is sealed at rest: its size only, so a log line or a traceback does not carry it.
        extra = f", accepts={[str(d) for d in self.accepts]!r}" if self.accepts else ""
        if self.tool is not None:
            extra += f", tool={self.tool.name!r}"
        return (
            f"Question(id={self.id!r}, key={self.key!r}, run_id={self.run_id!r}, "
            f"prompt=<{len(self.prompt)} chars>, asked_at={self.asked_at!r}{extra})"
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """A human's answer to one question, with who gave it and when.

    `decision` is what the human decided (a plain-text answer is read by `read_text`; an answer
    recorded before decisions existed reads as `RESPOND`); `text` is the reason, note or response;
    `arguments` are the new arguments of an `EDIT` (None otherwise).
    """

    question_id: str
    text: str
    by: str
    answered_at: datetime
    decision: Decision = Decision.RESPOND
    arguments: Mapping[str, Any] | None = None

    def __repr__(self) -> str:
        # The answer is sealed at rest: its size only, so a log line or a traceback does not carry it.
        args = "" if self.arguments is None else f", arguments=<{', '.join(self.arguments)}>"
        return (
            f"Answer(question_id={self.question_id!r}, decision={self.decision.value!r}, "
            f"text=<{len(self.text)} chars>{args}, by={self.by!r}, answered_at={self.answered_at!r})"
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


class InvalidAnswer(BerthError, ValueError):
    """An answer berth refuses as given: a decision its question does not accept, or edit arguments that are
    not a JSON object. Nothing is recorded; the question is still pending. Carries `question_id` and `decision`."""

    def __init__(
        self,
        message: str,
        *,
        identity: str | None = None,
        key: str | None = None,
        question_id: str | None = None,
        decision: str | None = None,
    ):
        super().__init__(message, identity=identity, key=key)
        self.question_id = question_id
        self.decision = decision


class _WireTool(msgspec.Struct, omit_defaults=True):
    name: str
    arguments: dict[str, Any] = {}
    agent: str = ""
    description: str = ""
    call_id: str = ""


class _WireQuestion(msgspec.Struct, omit_defaults=True):
    id: str
    run_id: str
    prompt: str
    asked_at: datetime
    accepts: list[str] = []
    tool: _WireTool | None = None


class _WireAnswer(msgspec.Struct, omit_defaults=True):
    text: str
    by: str
    answered_at: datetime
    decision: str | None = None
    arguments: dict[str, Any] | None = None


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
        try:
            accepts = tuple(Decision(d) for d in q.accepts)
            tool = None if q.tool is None else ToolRequest(**msgspec.structs.asdict(q.tool))
            a = wire.answer
            decision = Decision.RESPOND if a is None or a.decision is None else Decision(a.decision)
        except (ValueError, TypeError):
            raise FormatError(
                f"question record at {where(self.identity, key)} holds a decision this berth does not know",
                identity=self.identity,
                key=key,
            ) from None
        question = Question(q.id, key, q.run_id, q.prompt, q.asked_at, accepts, tool)
        answer = None
        if a is not None:
            arguments = None if a.arguments is None else MappingProxyType(a.arguments)
            answer = Answer(q.id, a.text, a.by, a.answered_at, decision, arguments)
        return _Record(question, answer, env.deadline, token)

    @staticmethod
    def _envelope(question: Question, answer: Answer | None, deadline: datetime | None) -> Envelope:
        tool = question.tool
        wire_answer = None
        if answer is not None:
            wire_answer = _WireAnswer(
                answer.text,
                answer.by,
                answer.answered_at,
                None if answer.decision is Decision.RESPOND else answer.decision.value,  # as earlier versions wrote
                None if answer.arguments is None else dict(answer.arguments),
            )
        wire = _WireRecord(
            _RECORD_VERSION,
            _WireQuestion(
                question.id,
                question.run_id,
                question.prompt,
                question.asked_at,
                [d.value for d in question.accepts],
                None
                if tool is None
                else _WireTool(tool.name, dict(tool.arguments), tool.agent, tool.description, tool.call_id),
            ),
            wire_answer,
        )
        return Envelope(
            provider=_RECORD_PROVIDER,
            provider_state=_encoder.encode(wire),
            run_id=question.run_id,
            reason="answered" if answer is not None else "asked",
            deadline=deadline,
            created_at=question.asked_at,
        )

    def _refuse(self, key: str, question_id: str, decision: object, why: str) -> InvalidAnswer:
        return InvalidAnswer(
            f"answer to question {question_id!r} at {where(self.identity, key)} refused: {why}; nothing recorded",
            identity=self.identity,
            key=key,
            question_id=question_id,
            decision=str(decision) if decision is not None else None,
        )

    def _accepts(self, key: str, accepts: Iterable[object], tool: object) -> tuple[Decision, ...]:
        if isinstance(accepts, str | bytes) or not isinstance(accepts, Iterable):
            raise TypeError(f"accepts must be a sequence of berth.Decision, got {type(accepts).__name__}")
        out: list[Decision] = []
        for d in accepts:
            decision = _decision(d)
            if decision is None:
                raise InvalidAnswer(
                    f"question at {where(self.identity, key)} refused: unknown decision {d!r} "
                    f"(one of {', '.join(x.value for x in Decision)}); nothing asked",
                    identity=self.identity,
                    key=key,
                )
            if decision not in out:
                out.append(decision)
        if tool is not None and not isinstance(tool, ToolRequest):
            raise TypeError(f"tool must be a berth.ToolRequest or None, got {type(tool).__name__}")
        if Decision.EDIT in out and tool is None:
            raise InvalidAnswer(
                f"question at {where(self.identity, key)} refused: it accepts edit but names no tool "
                "whose arguments could be edited; nothing asked",
                identity=self.identity,
                key=key,
            )
        return tuple(out)

    def _decided(
        self, key: str, question_id: str, text: str, decision: object, arguments: object
    ) -> tuple[Decision | None, dict[str, Any] | None]:
        """The decision and arguments an answer names, checked before any I/O (None: read from the text)."""
        if decision is None:
            if arguments is not None:
                raise self._refuse(key, question_id, None, "arguments are given only with the edit decision")
            return None, None
        chosen = _decision(decision)
        if chosen is None:
            raise self._refuse(
                key, question_id, decision, f"unknown decision (one of {', '.join(d.value for d in Decision)})"
            )
        if chosen is Decision.EDIT:
            if arguments is None:
                raise self._refuse(key, question_id, chosen, "an edit needs the new arguments")
            try:
                return chosen, _json_object(arguments, "arguments")
            except TypeError as exc:
                raise self._refuse(key, question_id, chosen, str(exc)) from None
        if arguments is not None:
            raise self._refuse(key, question_id, chosen, "arguments are given only with the edit decision")
        return chosen, None

    # --- the protocol, as plans --------------------------------------------------------------

    def ask(
        self,
        key: str,
        prompt: str,
        run_id: str,
        question_id: str | None,
        deadline: datetime | None,
        accepts: Iterable[Decision | str] = (),
        tool: ToolRequest | None = None,
    ) -> Plan[Question]:
        """`QuestionStore.ask` as a plan: every argument checked before its one save."""
        key = self._key(key)
        _text(prompt, "prompt")
        _text(run_id, "run_id")
        decisions = self._accepts(key, accepts, tool)
        if question_id is None:
            question_id = os.urandom(16).hex()
        elif not _text(question_id, "question_id"):
            raise InvalidKey(f"empty question id at {where(self.identity, key)}", identity=self.identity, key=key)
        question = Question(question_id, key, run_id, prompt, self.clock(), decisions, tool)
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

    def provide(
        self,
        key: str,
        question_id: str,
        text: str,
        by: str,
        decision: Decision | str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Plan[Answer]:
        """`QuestionStore.provide` as a plan: read, decide, save if unchanged since read; again on a lost race."""
        key = self._key(key)
        _text(question_id, "question_id")
        _text(text, "text")
        _text(by, "by")
        named, new_arguments = self._decided(key, question_id, text, decision, arguments)
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
            chosen, body = (named, text) if named is not None else read_text(text, pending.decisions)
            if record.answer is not None:
                a = record.answer
                given = None if a.arguments is None else dict(a.arguments)
                if (a.text, a.by, a.decision, given) == (body, by, chosen, new_arguments):
                    return a
                raise AnswerRefused(
                    f"question {question_id!r} at {where(self.identity, key)} was already answered "
                    f"by {record.answer.by!r} at {record.answer.answered_at.isoformat()}",
                    identity=self.identity,
                    key=key,
                    question_id=question_id,
                    pending_id=pending.id,
                )
            if chosen not in pending.decisions:
                raise self._refuse(
                    key,
                    question_id,
                    chosen,
                    f"the question accepts {', '.join(d.value for d in pending.decisions)}, not {chosen.value}",
                )
            frozen = None if new_arguments is None else MappingProxyType(new_arguments)
            answer = Answer(question_id, body, by, self.clock(), chosen, frozen)
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
        notify: Webhook | None = None,
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
        self.notify = as_webhook(notify)
        """Told of every question asked and answer given through this store (None: nobody is told)."""

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
        """Release the backend's connections; with `notify`, first wait up to its `close_timeout` for its queue."""
        if self.notify is not None:
            self.notify.flush(self.notify.close_timeout)
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
        question = run(self.core.ask(key, prompt, run_id, question_id, deadline, accepts, tool), self._targets)
        if self.notify is not None:
            self.notify.asked(self.identity, question, deadline)  # queued: never waits, never raises
        return question

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

    def provide(
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
        answer = run(self.core.provide(key, question_id, text, by, decision, arguments), self._targets)
        if self.notify is not None:
            self.notify.answered(self.identity, key, answer)
        return answer

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
    notify: Webhook | None = None,
    **options: Any,
) -> QuestionStore:
    """Open the question store at `url`: the same schemes and backends as `open_store`.

    Args:
        url: memory://, file:///dir, sqlite:////abs/file.db, postgresql://, redis://, gs://, s3://.
        identity: the namespace of one agent, tenant or service (as its envelope store's).
        sealer: seals prompts and answers; None stores them readable (development only).
        accept_plaintext: let a sealed store read plaintext records.
        clock: returns "now" as an aware datetime (tests inject one).
        notify: a `berth.Webhook` told of every question asked and answer given through this store
            (queued and sent in the background: a park never waits on it; docs/notifications.md).
        **options: passed to the backend.

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        TypeError: `notify` is not a `berth.Webhook` (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    validate_identity(identity)
    as_webhook(notify)
    backend = open_backend(url, **options)
    return QuestionStore(
        backend, identity=identity, sealer=sealer, accept_plaintext=accept_plaintext, clock=clock, notify=notify
    )


publish(globals())  # its public names read as berth.X
