"""What the framework integrations share: one question per pending tool call, answers mapped back, async.

A framework's paused run waits on several tool calls at once (approvals,
external results). The coordinator asks one question per key; `CallQuestions`
fans that out to one question per call, under ``<key>/call-<i>`` (i from 1), so
each shows up in `berth questions` and the inbox on its own and is answered
with `berth answer '<key>/call-<i>' TEXT`. To the coordinator the set is one
question: it is answered once every call's question is, and consumed together.

The sub-questions' ids are ``<parent>.<i>.<n>`` (parent: the id the coordinator
binds to the parked envelope), so a stale sub-question of an earlier park of the
same key is never taken for an answer to this one.

Each question is structured (`berth.Decision`, `berth.ToolRequest`): a tool approval
accepts approve, reject, edit and respond and names its call (name, arguments, agent,
description, call id); an external call accepts a response. The set's answer carries,
per call, the sub-question id, the call id and the decision, so a wake applies each
answer to the one call it was given for (`answers_by_call`), and `tool_decision` reads
it for the framework: approve, edit with exactly the new arguments, or reject with a
reason fed back to the model. Free text never approves.

Storage is reached through `berth.aio` when the host hands `berth.aio` stores (the
coordinator awaited; natively async on PostgreSQL and Redis), and through the sync
coordinator in a worker thread when it hands sync ones: `Parking._drive`.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson

from berth._aio_questions import AsyncQuestionStore
from berth._aio_store import AsyncStore
from berth._answers import frame_answer
from berth._coordinator_core import CoordinatorCore, QuestionsLike, Wake, WakeDecision
from berth._envelope import Envelope, check_resumable
from berth._errors import InvalidEnvelope, where
from berth._keys import validate_key
from berth._plan import InThreads, Plan, arun, role, run, step
from berth._question_types import Answer, Decision, Question, ToolRequest, read_text
from berth._questions import QuestionStore
from berth._store import Store, StoreSteps

__all__ = [
    "APPROVAL",
    "CallPlans",
    "CallQuestions",
    "Outcome",
    "Parking",
    "Pending",
    "ToolDecision",
    "answers_by_call",
    "call_key",
    "human_response",
    "interrupt_question",
    "parse_approval",
    "rejection",
    "tool_decision",
]

log = logging.getLogger("berth")

T = TypeVar("T")

APPROVAL = (Decision.APPROVE, Decision.REJECT, Decision.EDIT, Decision.RESPOND)
"""What a tool approval accepts (LangChain Agent Inbox's accept, respond, edit; reject with a reason)."""


def call_key(key: str, index: int) -> str:
    """The question key of the `index`-th (from 1) pending call of the run parked under `key`."""
    return f"{key}/call-{index}"


def parse_approval(text: str) -> tuple[bool, str | None]:
    """Read a human's plain-text answer to an approval question: `(approved, reason)`.

    Only an answer that is exactly an approval (`approve`, `yes`, `ok`, ... and nothing
    else) approves; `reject` or `no` alone, or followed by `:` and a reason, rejects with
    that reason (`reject: not on a Friday`). Anything else, `yes but only archive it`
    included, and an empty answer, rejects with the whole text as the reason: an approval
    is never read into an answer that does not say exactly that.
    """
    decision, reason = read_text(text, (Decision.APPROVE, Decision.REJECT))
    if decision is Decision.APPROVE:
        return True, None
    return False, reason or None


class Pending(NamedTuple):
    """One tool call a paused run waits on, as the integrations ask about it."""

    id: str
    name: str
    arguments: str
    kind: str  # "approval" or "result"
    agent: str = ""
    description: str = ""


def _arguments(arguments: str) -> dict[str, Any] | None:
    """The call's arguments as a JSON object, or None when the model's text is not one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _prompt(call: Pending, run_id: str) -> str:
    who = f"Run {run_id!r}" + (f" (agent {call.agent!r})" if call.agent else "")
    if call.kind == "approval":
        return (
            f"{who} wants to call {call.name}({call.arguments}). Approve it, reject it with a reason "
            "(the reason goes back to the model), or edit its arguments. Free text never approves."
        )
    return f"{who} waits for the result of {call.name}({call.arguments}). Answer with the tool's result."


def _structured(call: Pending) -> tuple[tuple[Decision, ...], ToolRequest]:
    """What the question about `call` accepts, and the call it names."""
    arguments = _arguments(call.arguments)
    tool = ToolRequest(
        call.name or "tool", arguments or {}, agent=call.agent, description=call.description, call_id=call.id
    )
    if call.kind != "approval":
        return (Decision.RESPOND,), tool
    if arguments is None:  # arguments that are not a JSON object cannot be edited as one
        return tuple(d for d in APPROVAL if d is not Decision.EDIT), tool
    return APPROVAL, tool


@role
class QuestionRecords(Protocol):
    """The question store's steps in `CallPlans`' plans (`berth.QuestionStore` plays it; the aio one awaited)."""

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
        """`QuestionStore.ask`."""
        ...

    def pending(self, key: str) -> Question | None:
        """`QuestionStore.pending`."""
        ...

    def record(self, key: str) -> tuple[Question, Answer | None] | None:
        """`QuestionStore.record`."""
        ...

    def consume(self, key: str, question_id: str) -> bool:
        """`QuestionStore.consume`."""
        ...


@role
class Framework(Protocol):
    """The framework's run, resumed as the last step of a wake (`Parking.resume`)."""

    def __call__(self, wake: Wake) -> object:
        """Resume the run `wake` delivered; its result is the `Outcome`'s."""
        ...


class CallPlans:
    """A question store view for the coordinator, as plans: one question per pending call, answered as a set.

    `CallQuestions` runs each plan (`berth._plan`) against a `berth.QuestionStore`;
    `AsyncCallQuestions` awaits the same plans against a `berth.aio.AsyncQuestionStore`.
    """

    def __init__(self, questions: Any, calls: Sequence[Pending] = (), deadline: datetime | None = None):
        self.questions = questions
        self.calls = tuple(calls)
        self.deadline = deadline

    def _ask(self, key: str, prompt: str, run_id: str, question_id: str) -> Plan[Question]:
        n = len(self.calls)
        # The first call's question is asked last: once it names this parent, all of them do.
        for i in range(n, 0, -1):
            call_ = self.calls[i - 1]
            prompt_i = _prompt(call_, run_id)
            accepts, tool = _structured(call_)
            yield from step(QuestionRecords.ask, call_key(key, i), prompt_i, run_id=run_id,
                question_id=f"{question_id}.{i}.{n}", deadline=self.deadline, accepts=accepts, tool=tool,
            )  # fmt: skip
        i = n + 1
        while (stale := (yield from step(QuestionRecords.pending, call_key(key, i)))) is not None:
            yield from step(QuestionRecords.consume, call_key(key, i), stale.id)  # an earlier park's extra calls
            i += 1
        first = yield from step(QuestionRecords.pending, call_key(key, 1))
        assert first is not None
        return Question(question_id, key, run_id, prompt, first.asked_at)

    def _pending(self, key: str) -> Plan[Question | None]:
        first = yield from step(QuestionRecords.pending, call_key(key, 1))
        if first is None:
            return None
        parent = first.id.split(".", 1)[0]
        return Question(parent, key, first.run_id, first.prompt, first.asked_at)

    def _answer(self, key: str) -> Plan[Answer | None]:
        # One read per call: the question (naming the park and the count) with its answer.
        first = yield from step(QuestionRecords.record, call_key(key, 1))
        if first is None:
            return None
        parent, _, count = first[0].id.partition(".1.")
        if not count.isdigit():
            return None
        n = int(count)
        answers: list[Answer] = []
        docs: list[dict[str, Any]] = []
        for i in range(1, n + 1):
            record = first if i == 1 else (yield from step(QuestionRecords.record, call_key(key, i)))
            if record is None or record[1] is None or record[0].id != f"{parent}.{i}.{n}":
                return None
            question, answer = record
            assert answer is not None  # checked above (a tuple's item is not narrowed)
            answers.append(answer)
            docs.append(
                {
                    "question_id": question.id,
                    "call_id": question.tool.call_id if question.tool is not None else "",
                    "decision": answer.decision.value,
                    "text": answer.text,
                    "arguments": None if answer.arguments is None else dict(answer.arguments),
                    "by": answer.by,
                }
            )
        by = ", ".join(dict.fromkeys(a.by for a in answers))
        return Answer(parent, json.dumps(docs), by, max(a.answered_at for a in answers))

    def _consume(self, key: str, question_id: str) -> Plan[bool]:
        removed = False
        i = 1
        while True:
            q = yield from step(QuestionRecords.pending, call_key(key, i))
            if q is None or not q.id.startswith(question_id + "."):
                return removed
            removed = (yield from step(QuestionRecords.consume, call_key(key, i), q.id)) or removed
            i += 1


class CallQuestions(CallPlans):
    """`CallPlans` run against a `berth.QuestionStore`: a `QuestionsLike` for the coordinator."""

    def _run(self, plan: Plan[T]) -> T:
        return run(plan, {QuestionRecords: self.questions})

    def ask(
        self, key: str, prompt: str, *, run_id: str, question_id: str, deadline: datetime | None = None
    ) -> Question:
        # The deadline this view was made with is the run's: the coordinator's is the same one.
        return self._run(self._ask(key, prompt, run_id, question_id))

    def pending(self, key: str) -> Question | None:
        return self._run(self._pending(key))

    def answer(self, key: str) -> Answer | None:
        return self._run(self._answer(key))

    def consume(self, key: str, question_id: str) -> bool:
        return self._run(self._consume(key, question_id))


class AsyncCallQuestions(CallPlans):
    """`CallPlans` awaited against a `berth.aio.AsyncQuestionStore`: an `AsyncQuestionsLike` for the coordinator."""

    async def _arun(self, plan: Plan[T]) -> T:
        return await arun(plan, {QuestionRecords: self.questions})

    async def ask(
        self, key: str, prompt: str, *, run_id: str, question_id: str, deadline: datetime | None = None
    ) -> Question:
        return await self._arun(self._ask(key, prompt, run_id, question_id))

    async def pending(self, key: str) -> Question | None:
        return await self._arun(self._pending(key))

    async def answer(self, key: str) -> Answer | None:
        return await self._arun(self._answer(key))

    async def consume(self, key: str, question_id: str) -> bool:
        return await self._arun(self._consume(key, question_id))


def _json_or_text(arguments: str) -> bytes:
    try:
        json.loads(arguments)
    except ValueError:  # a model can emit arguments that are not JSON: keep them, as a JSON string
        return json.dumps(arguments).encode()
    return arguments.encode()


class Outcome(NamedTuple):
    """What a framework wake did: the coordinator's `decision`, the resumed run's `result` (RESUME only), the `wake`."""

    decision: WakeDecision
    result: Any
    wake: Wake


class Parking:
    """Park a framework's paused run as an envelope plus one question per call; wake it exactly once."""

    def __init__(
        self,
        store: Store | AsyncStore,
        questions: QuestionStore | AsyncQuestionStore,
        *,
        provider: str,
        model: str,
        config_digest: str,
        default_deadline: timedelta = timedelta(days=14),
    ):
        self.native = isinstance(store, AsyncStore)
        want = (AsyncStore, AsyncQuestionStore) if self.native else (Store, QuestionStore)
        if not isinstance(store, want[0]) or not isinstance(questions, want[1]):
            raise TypeError(
                "pass a berth.aio.AsyncStore and a berth.aio.AsyncQuestionStore, or a berth.Store and a "
                f"berth.QuestionStore; got {type(store).__name__} and {type(questions).__name__}"
            )
        self.store = store
        self.questions = questions
        self.provider = provider
        self.model = model
        self.config_digest = config_digest
        self.default_deadline = default_deadline

    def _validate(self, envelope: Envelope) -> None:
        check_resumable(
            envelope,
            provider=self.provider,
            model=self.model,
            config_digest=self.config_digest,
            now=self.store.now(),
        )

    async def _drive(
        self,
        make: Callable[[CoordinatorCore], Plan[T]],
        calls: Sequence[Pending] = (),
        deadline: Any = None,
        resume: Callable[[Wake], Awaitable[Any]] | None = None,
    ) -> T:
        """A coordinator's plan (`suspend_plan`, `wake_plan`) over this parking's stores, awaited: natively
        over `berth.aio` ones, each step in a worker thread over sync ones (`InThreads`), so a cancelled
        wake hands its run back either way (a whole wake in `asyncio.to_thread` dropped it)."""
        targets: dict[Any, Any]
        if isinstance(self.store, AsyncStore):
            assert isinstance(self.questions, AsyncQuestionStore)
            core = self.store.core
            questions = AsyncCallQuestions(self.questions, calls, deadline)
            targets = {StoreSteps: self.store.steps, QuestionsLike: questions, Framework: resume}
        else:
            assert isinstance(self.questions, QuestionStore)
            core = self.store.core
            threaded = InThreads(CallQuestions(self.questions, calls, deadline))
            targets = {StoreSteps: InThreads(self.store.steps), QuestionsLike: threaded, Framework: resume}
        plans = CoordinatorCore(core, default_deadline=self.default_deadline, validate=self._validate)
        return await arun(make(plans), targets)

    def envelope(
        self,
        key: str,
        *,
        provider_state: Any,
        calls: Sequence[Pending],
        loop_state: Any = None,
        run_id: str | None = None,
        deadline: datetime | None = None,
        labels: dict[str, str] | None = None,
    ) -> Envelope:
        if not calls:
            raise InvalidEnvelope(
                f"park at {where(self.store.identity, key)} refused: the run waits on no tool call; nothing saved",
                identity=self.store.identity,
                key=key,
            )
        from berth._envelope import PendingCall

        validate_key(key, self.store.identity)
        validate_key(call_key(key, len(calls)), self.store.identity)  # the questions' keys, before any I/O
        return Envelope(
            provider=self.provider,
            model=self.model,
            config_digest=self.config_digest,
            run_id=run_id or secrets.token_hex(8),
            provider_state=provider_state,
            loop_state=loop_state,
            pending_calls=[PendingCall(c.id, c.name, _json_or_text(c.arguments)) for c in calls],
            turn=0,
            remaining_turns=1,
            reason=f"awaiting {len(calls)} human answer{'s' if len(calls) != 1 else ''}",
            deadline=deadline or self.store.now() + self.default_deadline,
            labels=labels,
        )

    async def park(self, key: str, envelope: Envelope, calls: Sequence[Pending]) -> Envelope:
        return await self._drive(lambda c: c.suspend_plan(key, envelope, None), calls, envelope.deadline)

    async def wake(self, key: str) -> Wake:
        """The coordinator's wake of the run under `key`, alone (the framework's run is `resume`'s)."""
        return await self._drive(lambda c: c.wake_plan(key))

    async def resume(self, key: str, resume: Callable[[Wake], Awaitable[Any]]) -> Outcome:
        """Wake the run under `key`; on RESUME, `await resume(wake)` (the framework's run) as the plan's last step.

        The framework's run is a step after the commit point: cancelled while it runs, it runs on to
        its end and the outcome is returned (`berth._plan.commit`), so a delivered run is never dropped
        half-resumed; cancelled before the commit's outcome is known, the run is parked again.
        """
        return await self._drive(lambda c: _wake_then(c, key), resume=resume)


def _wake_then(coordinator: CoordinatorCore, key: str) -> Plan[Outcome]:
    """The coordinator's wake, then on RESUME the framework's run (the "framework" role: an async callable)."""
    woke = yield from coordinator.wake_plan(key)
    if woke.decision is not WakeDecision.RESUME:
        return Outcome(woke.decision, None, woke)
    result = yield from step(Framework.__call__, woke)
    return Outcome(WakeDecision.RESUME, result, woke)


def answers_by_call(wake: Wake) -> dict[str, Answer]:
    """The human's answer for each pending call id of a RESUME wake, each bound to the call it was given for.

    The set's answer lists, per call, the sub-question it answered (``<parent>.<i>.<n>``, the
    parent being the question the parked run is bound to) and the call id that question named.
    An entry is taken only when both match the parked run's `i`-th pending call, so an answer is
    never applied to another call than the one it was given for; a call left without one is
    absent (the integrations leave it pending or deny it, never approve it). Never raises: the
    claim is already the commit point.
    """
    assert wake.envelope is not None and wake.answer is not None
    calls = wake.envelope.pending_calls
    n = len(calls)
    parent = wake.answer.question_id
    try:
        docs = json.loads(wake.answer.text)
    except ValueError:
        docs = None
    if not isinstance(docs, list) or len(docs) != n:
        log.warning("berth: the answers to run %r do not match its %d pending calls", wake.envelope.run_id, n)
        return {}
    found: dict[str, Answer] = {}
    for i, (call_, doc) in enumerate(zip(calls, docs, strict=True), 1):
        if not isinstance(doc, dict) or doc.get("question_id") != f"{parent}.{i}.{n}":
            continue
        named = doc.get("call_id") or call_.id  # "" for a question asked before it named its call
        if named != call_.id:
            continue
        try:
            decision = Decision(doc.get("decision", "respond"))
        except ValueError:
            continue
        arguments = doc.get("arguments")
        text = doc.get("text")
        if not isinstance(text, str) or (arguments is not None and not isinstance(arguments, dict)):
            continue
        found[call_.id] = Answer(
            doc["question_id"], text, str(doc.get("by", wake.answer.by)), wake.answer.answered_at, decision, arguments
        )
    return found


class ToolDecision(NamedTuple):
    """What a human decided about one tool call, as a framework applies it.

    `kind` is `approve` (run it as asked), `edit` (run it with exactly `arguments`), or
    `reject` (do not run it; `reason`, which may be None, goes back to the model).
    """

    kind: str
    arguments: dict[str, Any] | None = None
    reason: str | None = None


def tool_decision(answer: Answer | None) -> ToolDecision:
    """Read an answer to a tool approval: approve, edit or reject, never a guess from prose.

    `approve` approves (its text is a note no framework passes on); `edit` runs the call with the
    answer's arguments; `reject` rejects with its text as the reason; `ignore` rejects with no
    reason. A free-text `respond` approves only when it is exactly an approval (as answers given
    before decisions existed were recorded); any other text rejects, with the text as the reason,
    fed back to the model. No answer rejects.
    """
    if answer is None:
        return ToolDecision("reject", reason="no answer was given for this call")
    d = answer.decision
    if d is Decision.APPROVE:
        return ToolDecision("approve")
    if d is Decision.EDIT and answer.arguments is not None:
        return ToolDecision("edit", arguments=dict(answer.arguments))
    if d is Decision.RESPOND:
        approved, reason = parse_approval(answer.text)
        return ToolDecision("approve") if approved else ToolDecision("reject", reason=reason)
    if d is Decision.REJECT:
        return ToolDecision("reject", reason=answer.text.strip() or None)
    return ToolDecision("reject")  # ignore (or an edit without arguments): nothing runs


def rejection(reason: str | None) -> str:
    """The message a rejected call sends back to the model: the human's reason, framed."""
    if not reason:
        return "A human rejected this tool call."
    return "A human rejected this tool call, and gave this reason:\n" + frame_answer(reason)


# --- LangGraph's Agent Inbox convention (HumanInterrupt in, HumanResponse out) -------------------

_INBOX_DECISIONS = (
    ("allow_accept", (Decision.APPROVE,)),
    ("allow_edit", (Decision.EDIT,)),
    ("allow_respond", (Decision.REJECT, Decision.RESPOND)),  # a rejection is a response that gives its reason
    ("allow_ignore", (Decision.IGNORE,)),
)


def _human_interrupt(value: Any) -> Mapping[str, Any] | None:
    """`value` as one Agent Inbox `HumanInterrupt` (or a list holding exactly one), else None."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if not isinstance(value, Mapping):
        return None
    request, config = value.get("action_request"), value.get("config")
    if not isinstance(request, Mapping) or not isinstance(config, Mapping):
        return None
    if (
        not isinstance(request.get("action"), str)
        or not request["action"]
        or not isinstance(request.get("args"), Mapping)
    ):
        return None
    return value


def interrupt_question(value: Any) -> tuple[str, tuple[Decision, ...], ToolRequest | None]:
    """The question an interrupt's value asks: `(prompt, accepts, tool)`.

    A value in LangGraph's Agent Inbox convention — a `HumanInterrupt` (`action_request` with
    `action` and `args`, `config` with `allow_accept`/`allow_edit`/`allow_respond`/`allow_ignore`,
    `description`), or a list of exactly one — is a structured tool approval: the action is the
    tool, its args the arguments, and the config says what an answer may decide (`allow_respond`
    offers reject and respond: both reach the graph as a response). Any other value asks for free
    text: its text, or its JSON.
    """
    found = _human_interrupt(value)
    if found is None:
        prompt = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
        return prompt, (), None
    request, config = found["action_request"], found["config"]
    description = found.get("description")
    description = description if isinstance(description, str) else ""
    try:
        tool = ToolRequest(request["action"], request["args"], description=description)
    except (TypeError, ValueError):  # arguments that are not JSON: free text, as any other value
        return orjson.dumps(found, default=str).decode(), (), None
    accepts = tuple(d for flag, ds in _INBOX_DECISIONS if config.get(flag) for d in ds)
    arguments = json.dumps(dict(tool.arguments), ensure_ascii=False)
    prompt = (description + "\n\n" if description else "") + f"{tool.name}({arguments})"
    return prompt, accepts, tool


def human_response(answer: Answer, action: str = "") -> dict[str, Any]:
    """An answer as LangGraph's Agent Inbox `HumanResponse`: what a graph that asked a `HumanInterrupt` resumes with.

    approve → `{"type": "accept", "args": None}`; edit → `{"type": "edit", "args": {"action": action,
    "args": <the edited arguments>}}`; reject → `{"type": "response", "args": <the reason>}`; respond →
    `{"type": "response", "args": <the text>}` (free text never accepts); ignore → `{"type": "ignore"}`.

    Args:
        answer: the answer to the interrupt's question (`berth.Answer`).
        action: the interrupt's action (the question's `tool.name`), named again in an edit.
    """
    d = answer.decision
    if d is Decision.APPROVE:
        return {"type": "accept", "args": None}
    if d is Decision.EDIT and answer.arguments is not None:
        return {"type": "edit", "args": {"action": action, "args": dict(answer.arguments)}}
    if d is Decision.IGNORE or d is Decision.EDIT:
        return {"type": "ignore", "args": None}
    return {"type": "response", "args": answer.text}
