"""Structured decisions: questions that declare what they accept, answers that record what was decided.

The same cases run against `berth.QuestionStore` and `berth.aio.AsyncQuestionStore` (one `QuestionCore`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

import berth
import berth.aio
from berth._question_types import is_approval, read_text
from berth.backends import open_backend
from berth.testing import SECRET, FakeClock
from tests.test_questions import Flaky

IDENTITY = "agent"
KEY = "ops/ticket-7/call-1"
APPROVAL = ("approve", "reject", "edit", "respond")
TOOL = berth.ToolRequest(
    "archive_repo",
    {"repo": f"acme/{SECRET}", "force": False},
    agent="ops",
    description="Archive a repository",
    call_id="call_1",
)
D = berth.Decision


class Both:
    """One question store, called as the sync store or awaited as the async one (`await_` runs a coroutine)."""

    def __init__(self, sync: berth.QuestionStore | None, aio: berth.aio.AsyncQuestionStore | None):
        self.sync, self.aio = sync, aio

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.sync is not None:
            method: Callable[..., Any] = getattr(self.sync, name)
            return method

        def awaited(*args: Any, **kw: Any) -> Any:
            return asyncio.run(getattr(self.aio, name)(*args, **kw))

        return awaited


@pytest.fixture
def backend() -> Iterator[Flaky]:
    b = Flaky(open_backend("memory://"))
    yield b
    b.close()


@pytest.fixture(params=["sync", "async"])
def qs(request: pytest.FixtureRequest, backend: Flaky) -> Both:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    if request.param == "sync":
        return Both(berth.QuestionStore(backend, identity=IDENTITY, sealer=sealer, clock=FakeClock()), None)
    from berth.backends._aio import ThreadedBackend

    aio = berth.aio.AsyncQuestionStore(ThreadedBackend(backend), identity=IDENTITY, sealer=sealer, clock=FakeClock())
    return Both(None, aio)


def ask_approval(qs: Both) -> berth.Question:
    question: berth.Question = qs.ask(KEY, "May I archive it?", run_id="r1", accepts=APPROVAL, tool=TOOL)
    return question


# --- reading plain text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "decision", "kept"),
    [
        ("approve", D.APPROVE, ""),
        ("  Yes! ", D.APPROVE, ""),
        ("LGTM.", D.APPROVE, ""),
        ("yes but only archive it", D.RESPOND, "yes but only archive it"),
        ("approve: fine", D.RESPOND, "approve: fine"),
        ("ok, but not the tags", D.RESPOND, "ok, but not the tags"),
        ("reject", D.REJECT, ""),
        ("reject: not on a Friday", D.REJECT, "not on a Friday"),
        ("No: wrong repo", D.REJECT, "wrong repo"),
        ("no way, wrong repo", D.RESPOND, "no way, wrong repo"),
        ("", D.RESPOND, ""),
    ],
)
def test_plain_text_to_an_approval_question_approves_only_when_it_is_exactly_an_approval(
    text: str, decision: berth.Decision, kept: str
) -> None:
    assert read_text(text, [D.APPROVE, D.REJECT, D.EDIT, D.RESPOND]) == (decision, kept)


def test_without_respond_free_text_is_a_rejection_whose_reason_is_the_text() -> None:
    assert read_text("yes but only archive it", [D.APPROVE, D.REJECT]) == (D.REJECT, "yes but only archive it")
    assert read_text("yes", [D.APPROVE, D.REJECT]) == (D.APPROVE, "")
    # A question that accepts no approval reads every text as a response, "approve" included.
    assert read_text("approve", []) == (D.RESPOND, "approve")
    assert is_approval(" OK ") and not is_approval("ok then") and not is_approval("approve: fine")


# --- the store -----------------------------------------------------------------------------


def test_a_tool_approval_round_trips_with_its_decisions_and_tool(qs: Both) -> None:
    asked = ask_approval(qs)
    assert asked.accepts == (D.APPROVE, D.REJECT, D.EDIT, D.RESPOND)
    pending = qs.pending(KEY)
    assert pending == asked
    assert pending.tool == TOOL and dict(pending.tool.arguments) == {"repo": f"acme/{SECRET}", "force": False}
    assert pending.decisions == asked.accepts
    assert SECRET not in repr(pending) and "archive_repo" in repr(pending)


def test_an_approval_with_a_note_keeps_the_note(qs: Both) -> None:
    asked = ask_approval(qs)
    answer = qs.provide(KEY, asked.id, "fine, it is dead", by="alice", decision="approve")
    assert (answer.decision, answer.text, answer.arguments) == (D.APPROVE, "fine, it is dead", None)
    assert qs.answer(KEY) == answer


def test_an_edit_records_exactly_the_new_arguments(qs: Both) -> None:
    asked = ask_approval(qs)
    new = {"repo": "acme/old", "force": True, "note": ["α", 1.5, None]}
    answer = qs.provide(KEY, asked.id, "only the old one", by="alice", decision=D.EDIT, arguments=new)
    new["repo"] = "changed after the call"  # the answer holds its own copy
    stored = qs.answer(KEY)
    assert stored == answer and stored.decision is D.EDIT
    assert dict(stored.arguments) == {"repo": "acme/old", "force": True, "note": ["α", 1.5, None]}
    with pytest.raises(TypeError):
        stored.arguments["repo"] = "x"


def test_free_text_to_an_approval_question_is_recorded_as_a_response_not_an_approval(qs: Both) -> None:
    asked = ask_approval(qs)
    answer = qs.provide(KEY, asked.id, "yes but only archive it", by="alice")
    assert (answer.decision, answer.text) == (D.RESPOND, "yes but only archive it")
    assert qs.provide(KEY, asked.id, "yes but only archive it", by="alice") == answer  # a retry is idempotent


def test_exact_approval_text_is_recorded_as_an_approval(qs: Both) -> None:
    asked = ask_approval(qs)
    assert qs.provide(KEY, asked.id, "approve", by="alice").decision is D.APPROVE
    with pytest.raises(berth.AnswerRefused):  # already answered: another decision is refused
        qs.provide(KEY, asked.id, "reject: changed my mind", by="alice")


def test_a_decision_the_question_does_not_accept_is_refused_and_nothing_is_recorded(qs: Both, backend: Flaky) -> None:
    asked = qs.ask(KEY, "What is the ticket's priority?", run_id="r1")
    assert asked.accepts == () and asked.decisions == (D.RESPOND,)
    with pytest.raises(berth.InvalidAnswer) as info:
        qs.provide(KEY, asked.id, "", by="alice", decision="approve")
    assert info.value.decision == "approve" and info.value.question_id == asked.id
    assert repr(KEY) in str(info.value) and "accepts respond" in str(info.value)
    assert qs.answer(KEY) is None
    approval = qs.ask(KEY, "May I?", run_id="r1", accepts=["approve", "reject"])
    with pytest.raises(berth.InvalidAnswer):
        qs.provide(KEY, approval.id, "sure", by="alice", decision="ignore")
    assert qs.provide(KEY, approval.id, "sure, why not", by="alice").decision is D.REJECT  # fails closed


@pytest.mark.parametrize(
    ("decision", "arguments"),
    [
        ("maybe", None),
        (3, None),
        ("edit", None),
        ("edit", ["not", "an", "object"]),
        ("edit", "{}"),
        ("edit", {1: "int key"}),
        ("edit", {"x": float("nan")}),
        ("edit", {"x": object()}),
        ("approve", {"x": 1}),
        (None, {"x": 1}),
    ],
)
def test_malformed_decisions_are_refused_before_any_io(qs: Both, backend: Flaky, decision: Any, arguments: Any) -> None:
    backend.calls.clear()
    with pytest.raises(berth.InvalidAnswer) as info:
        qs.provide(KEY, "qid", "text", by="alice", decision=decision, arguments=arguments)
    assert repr(KEY) in str(info.value) and SECRET not in str(info.value)
    assert backend.calls == []


def test_malformed_questions_are_refused_before_any_io(qs: Both, backend: Flaky) -> None:
    backend.calls.clear()
    with pytest.raises(berth.InvalidAnswer):
        qs.ask(KEY, "q", accepts=["approve", "perhaps"])
    with pytest.raises(berth.InvalidAnswer):
        qs.ask(KEY, "q", accepts=["edit"])  # nothing to edit without a tool
    with pytest.raises(TypeError):
        qs.ask(KEY, "q", accepts="approve")
    with pytest.raises(TypeError):
        qs.ask(KEY, "q", accepts=["approve"], tool={"name": "x"})
    assert backend.calls == []
    with pytest.raises(TypeError):
        berth.ToolRequest("x", ["a"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        berth.ToolRequest("")


def test_records_written_before_decisions_read_as_free_text(backend: Flaky) -> None:
    """A record in the wire format earlier versions wrote: no accepts, no tool, no decision."""
    questions = berth.QuestionStore(backend, identity=IDENTITY, clock=FakeClock())
    asked = questions.ask(KEY, "Push to main?", run_id="r1")
    answered = questions.provide(KEY, asked.id, "approve", by="bob")
    name = f"{IDENTITY}:questions/{KEY}"
    got = backend.get(name)
    assert got is not None
    body = bytes(got[0])
    old = b'{"v":1,"question":{"id":"' + asked.id.encode() + b'","run_id":"r1","prompt":"Push to main?","asked_at":'
    assert old in body and b"accepts" not in body and b"decision" not in body  # byte for byte the old layout
    assert answered.decision is D.RESPOND and answered.text == "approve"
    assert questions.pending(KEY) == asked


def test_an_unknown_decision_on_disk_is_a_format_error(backend: Flaky) -> None:
    questions = berth.QuestionStore(backend, identity=IDENTITY, clock=FakeClock())
    asked = questions.ask(KEY, "Push?", run_id="r1", accepts=["approve", "reject"])
    questions.provide(KEY, asked.id, "", by="bob", decision="approve")
    core = questions.core
    record = questions._frames.load(KEY)
    assert record is not None
    wire = json.loads(record.envelope.provider_state)
    wire["answer"]["decision"] = "launch"
    questions._frames.save(KEY, record.envelope.replace(provider_state=msgspec.json.encode(wire)))
    with pytest.raises(berth.FormatError):
        questions.answer(KEY)
    assert core.identity == IDENTITY


def test_sync_and_async_stores_read_each_others_decisions(backend: Flaky) -> None:
    from berth.backends._aio import ThreadedBackend

    sync = berth.QuestionStore(backend, identity=IDENTITY)
    aio = berth.aio.AsyncQuestionStore(ThreadedBackend(backend), identity=IDENTITY)
    asked = sync.ask(KEY, "May I?", accepts=APPROVAL, tool=TOOL)

    async def answer() -> berth.Answer:
        assert await aio.pending(KEY) == asked
        return await aio.provide(KEY, asked.id, "", by="a", decision="edit", arguments={"repo": "acme/x"})

    answered = asyncio.run(answer())
    assert sync.answer(KEY) == answered and dict(answered.arguments or {}) == {"repo": "acme/x"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("approve", (True, None)),
        ("YES.", (True, None)),
        ("yes but only archive it", (False, "yes but only archive it")),
        ("approve: fine", (False, "approve: fine")),
        ("reject: not on a Friday", (False, "not on a Friday")),
        ("no", (False, None)),
        ("", (False, None)),
    ],
)
def test_parse_approval_approves_only_exactly_an_approval(text: str, expected: tuple[bool, str | None]) -> None:
    from berth._hitl import parse_approval

    assert parse_approval(text) == expected


def test_tool_decision_reads_each_decision() -> None:
    from datetime import datetime, timezone

    from berth._hitl import ToolDecision, tool_decision

    def answer(decision: berth.Decision, text: str = "", arguments: dict[str, Any] | None = None) -> berth.Answer:
        return berth.Answer("q", text, "alice", datetime.now(timezone.utc), decision, arguments)

    assert tool_decision(answer(D.APPROVE, "a note")) == ToolDecision("approve")
    assert tool_decision(answer(D.EDIT, "", {"a": 1})) == ToolDecision("edit", arguments={"a": 1})
    assert tool_decision(answer(D.REJECT, " why ")) == ToolDecision("reject", reason="why")
    assert tool_decision(answer(D.RESPOND, "yes but only archive it")).kind == "reject"
    assert tool_decision(answer(D.RESPOND, "lgtm")) == ToolDecision("approve")  # a record from before decisions
    assert tool_decision(answer(D.IGNORE)) == ToolDecision("reject")
    assert tool_decision(answer(D.EDIT)) == ToolDecision("reject")  # an edit without arguments runs nothing
    assert tool_decision(None).kind == "reject"


def test_answers_by_call_takes_only_answers_bound_to_their_call_and_never_raises() -> None:
    from datetime import datetime, timezone

    from berth._hitl import answers_by_call

    envelope = berth.Envelope(
        provider_state=b"{}",
        pending_calls=[berth.PendingCall("c1", "a", b"{}"), berth.PendingCall("c2", "b", b"{}")],
    )
    now = datetime.now(timezone.utc)

    def wake(docs: Any) -> berth.Wake:
        text = docs if isinstance(docs, str) else json.dumps(docs)
        return berth.Wake(berth.WakeDecision.RESUME, envelope, berth.Answer("P", text, "alice", now))

    good = {"question_id": "P.1.2", "call_id": "c1", "decision": "edit", "text": "", "arguments": {"x": 1}}
    legacy = {"question_id": "P.2.2", "call_id": "", "decision": "respond", "text": "yes", "by": "bob"}
    found = answers_by_call(wake([good, legacy]))
    assert found["c1"].decision is D.EDIT and found["c1"].arguments == {"x": 1}
    assert (found["c2"].text, found["c2"].by) == ("yes", "bob")  # a question that named no call: by position
    for bad in (
        {**good, "question_id": "Q.1.2"},  # another park's question
        {**good, "call_id": "c2"},  # given for another call
        {**good, "decision": "launch"},
        {**good, "text": 3},
        {**good, "arguments": [1]},
        "not an object",
    ):
        assert "c1" not in answers_by_call(wake([bad, legacy]))
    assert answers_by_call(wake([good])) == {}  # not one per call
    assert answers_by_call(wake("not json")) == {}
