"""The question store's core: every decision it makes, as plans over its records, and no I/O.

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

The record's wire format: `{"v": 1, "question": {"id", "run_id", "prompt",
"asked_at", "accepts"?, "tool"?}, "answer": {"text", "by", "answered_at",
"decision"?, "arguments"?} | null}`; the fields marked ? are written only when
set, so a record without decisions is byte for byte what earlier versions wrote,
and their records read as questions that accept a free-text response.

`QuestionStore` (`berth._questions`) and `berth.aio.AsyncQuestionStore`
(`berth._aio_questions`, the source the sync one is generated from) are its shells.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

import msgspec

from berth._envelope import Envelope
from berth._errors import BackendError, FormatError, IntegrityError, InvalidKey, TokenMismatch, where
from berth._keys import validate_identity, validate_key
from berth._plan import Plan, step
from berth._question_types import (
    Answer,
    AnswerRefused,
    Decision,
    InvalidAnswer,
    Question,
    ToolRequest,
    as_decision,
    json_object,
    read_text,
    text_arg,
)
from berth._store import StoreSteps
from berth._time import utcnow
from berth._token import Token

__all__ = ["NAMESPACE", "QuestionCore"]

log = logging.getLogger("berth")

NAMESPACE = "questions"
"""The question store's namespace: its frames are the identity `pr-bot:questions` (`pr-bot:questions/org/repo#42`)."""

_RECORD_VERSION = 1
_RECORD_PROVIDER = "berth.questions"
_RETRIES = 16  # each retry follows a concurrent change, and every change ends the loop


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
        parked = yield from step(StoreSteps.load, key, allow_expired=True)
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
            decision = as_decision(d)
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
        chosen = as_decision(decision)
        if chosen is None:
            raise self._refuse(
                key, question_id, decision, f"unknown decision (one of {', '.join(d.value for d in Decision)})"
            )
        if chosen is Decision.EDIT:
            if arguments is None:
                raise self._refuse(key, question_id, chosen, "an edit needs the new arguments")
            try:
                return chosen, json_object(arguments, "arguments")
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
        text_arg(prompt, "prompt")
        text_arg(run_id, "run_id")
        decisions = self._accepts(key, accepts, tool)
        if question_id is None:
            question_id = os.urandom(16).hex()
        elif not text_arg(question_id, "question_id"):
            raise InvalidKey(f"empty question id at {where(self.identity, key)}", identity=self.identity, key=key)
        question = Question(question_id, key, run_id, prompt, self.clock(), decisions, tool)
        yield from step(StoreSteps.save, key, self._envelope(question, None, deadline))
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
        text_arg(question_id, "question_id")
        text_arg(text, "text")
        text_arg(by, "by")
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
                yield from step(
                    StoreSteps.save, key, self._envelope(pending, answer, record.deadline), if_match=record.token
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
        text_arg(question_id, "question_id")
        for _ in range(_RETRIES):
            record = yield from self._read(key)
            if record is None or record.question.id != question_id:
                return False
            try:
                yield from step(StoreSteps.remove, key, record.token, "deleted")
            except TokenMismatch:
                continue
            return True
        raise BackendError(
            f"consume at {where(self.identity, key)} kept losing to concurrent writers",
            identity=self.identity,
            key=key,
        )
