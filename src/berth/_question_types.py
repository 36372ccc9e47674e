"""What a parked run asks a human and what the human decided: `Question`, `Answer`, `Decision`, `ToolRequest`.

Decisions. A question may declare the decisions it accepts (`Decision`: approve,
reject, edit, respond, ignore, as LangChain's Agent Inbox offers them) and, for a
tool approval, the call (`ToolRequest`: name, arguments as a JSON object, the
agent, a description, the call id). An answer records the decision made, its
text (a reason, a note, a response) and, for an edit, the new arguments. A plain
text answer (no decision named) to a question that accepts `approve` approves
only when it is exactly an approval (`approve`, `yes`, `ok`, ...); `reject` or
`reject: <reason>` rejects; anything else is a response where one is accepted,
else a rejection whose reason is the text: free text never approves.

The question store (`berth._question_core`, its shells `berth._questions` and
`berth._aio_questions`) keeps them; the answer errors (`AnswerRefused`,
`InvalidAnswer`) are the ones it raises.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from berth._errors import BerthError, TokenMismatch
from berth._public import publish

__all__ = [
    "APPROVALS",
    "Answer",
    "AnswerRefused",
    "Decision",
    "InvalidAnswer",
    "Question",
    "ToolRequest",
    "as_decision",
    "is_approval",
    "json_object",
    "read_text",
    "text_arg",
]


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


def as_decision(value: object) -> Decision | None:
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


def json_object(value: object, what: str) -> dict[str, Any]:
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
            text_arg(getattr(self, what), f"ToolRequest.{what}")
        if not self.name:
            raise ValueError("ToolRequest.name cannot be empty")
        object.__setattr__(self, "arguments", MappingProxyType(json_object(self.arguments, "ToolRequest.arguments")))

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


def text_arg(value: object, what: str) -> str:
    """`value`, which must be a str (TypeError naming `what` otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


publish(globals())  # its public names read as berth.X
