"""Park a pydantic-ai run that ended in `DeferredToolRequests`; resume it exactly once (extra `pydantic-ai`).

    agent = Agent(model, output_type=[str, DeferredToolRequests], ...)
    result = await agent.run("clean up acme/old")
    if isinstance(result.output, DeferredToolRequests):
        await berth.pydantic_ai.park(store, questions, "ops/ticket-7", result, agent=agent)
    ...                                   # humans: berth answer 'ops/ticket-7/call-1' approve
    outcome = await berth.pydantic_ai.wake(store, questions, "ops/ticket-7", agent)
    if outcome.decision is berth.WakeDecision.RESUME:
        print(outcome.result.output)

The run's message history is parked sealed, with one question per deferred
call: an approval (`requires_approval=True`, `ApprovalRequired`) is a structured
tool approval (the tool's name, its arguments as a JSON object, its description;
it accepts approve, reject, edit and respond): approve → `True`, edit →
`ToolApproved(override_args=...)` with exactly the edited arguments, reject (or
any free text that is not exactly an approval) → `ToolDenied(reason)`; an
external call (`CallDeferred`, external tools) asks for the tool's result, and
the answer's text is that result. On RESUME (exactly one
waker gets it) the run continues with `agent.run(message_history=...,
deferred_tool_results=...)`. The agent's configuration digest (instructions,
model, tools) guards the resume: a run parked under another configuration is
dropped as FRESH (reason "drifted"). See docs/integrations/pydantic-ai.md.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import orjson

from berth._aio_questions import AsyncQuestionStore
from berth._aio_store import AsyncStore
from berth._answers import NO_ANSWER
from berth._coordinator_core import Wake
from berth._envelope import Envelope, digest_json
from berth._hitl import Outcome, Parking, Pending, answers_by_call, parse_approval, rejection, tool_decision
from berth._questions import QuestionStore
from berth._store import Store

try:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.models import Model
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.pydantic_ai needs pydantic-ai: pip install 'berthing[pydantic-ai]'") from exc

__all__ = ["PROVIDER", "Outcome", "config_digest", "model_name", "park", "parse_approval", "wake"]

PROVIDER = "pydantic-ai"
"""The envelope's `provider` for runs parked by this module."""


def _describe(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{getattr(obj, '__module__', '')}.{name}"


def model_name(agent: Agent[Any, Any]) -> str:
    """The model an agent runs on, as the envelope records it: `system:model_name`, or the name it was given."""
    model = agent.model
    if isinstance(model, Model):
        return f"{model.system}:{model.model_name}"
    return str(model or "")


def _tools(agent: Agent[Any, Any]) -> list[Any]:
    docs: list[Any] = []
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)  # a FunctionToolset's registered tools
        if not isinstance(tools, dict):
            docs.append({"toolset": type(toolset).__qualname__, "id": getattr(toolset, "id", None)})
            continue
        for name in sorted(tools):
            tool = tools[name]
            docs.append({**dataclasses.asdict(tool.tool_def), "requires_approval": tool.requires_approval})
    return docs


def _descriptions(agent: Agent[Any, Any]) -> dict[str, str]:
    """Each function tool's description, by name (what an approver reads beside the call)."""
    found: dict[str, str] = {}
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)
        if isinstance(tools, dict):
            for name, tool in tools.items():
                description = getattr(tool.tool_def, "description", None)
                if isinstance(description, str):
                    found[name] = description
    return found


def _instructions(agent: Agent[Any, Any]) -> list[str]:
    # pydantic-ai has no public reader of an agent's instructions, which the digest must cover (a run
    # parked under other instructions never resumes): its own list is read, static text by value,
    # functions by name. So pyproject's pydantic-ai extra is capped below the next release, and
    # tests/test_other_packages.py fails on that release, naming what to check before raising it.
    out = []
    for item in getattr(agent, "_instructions", None) or ():
        instruction = getattr(item, "instruction", item)
        out.append(instruction if isinstance(instruction, str) else _describe(instruction))
    return out


def config_digest(agent: Agent[Any, Any]) -> str:
    """`sha256:` over what resuming `agent` depends on: instructions, model, tools (with their schemas), output type.

    Instruction functions are named by their qualified name (their text is made at run time).
    The agent's name is left out: pydantic-ai infers it from a variable name at the first run.
    """
    return digest_json(
        {
            "instructions": _instructions(agent),
            "model": model_name(agent),
            "tools": _tools(agent),
            "output_type": repr(agent.output_type),
        }
    )


def _parking(
    store: Store | AsyncStore,
    questions: QuestionStore | AsyncQuestionStore,
    agent: Agent[Any, Any],
    default_deadline: timedelta,
) -> Parking:
    return Parking(
        store,
        questions,
        provider=PROVIDER,
        model=model_name(agent),
        config_digest=config_digest(agent),
        default_deadline=default_deadline,
    )


async def park(
    store: Store | AsyncStore,
    questions: QuestionStore | AsyncQuestionStore,
    key: str,
    result: Any,
    *,
    agent: Agent[Any, Any],
    run_id: str | None = None,
    deadline: datetime | None = None,
    default_deadline: timedelta = timedelta(days=14),
    labels: dict[str, str] | None = None,
) -> Envelope:
    """Park a run whose output is `DeferredToolRequests` under `key`, asking one question per deferred call.

    Args:
        store: the identity's envelope store: a `berth.aio.AsyncStore` (awaited, natively async on
            PostgreSQL and Redis), or a `berth.Store` (run in a worker thread).
        questions: the identity's question store, of the same kind (`berth.aio.open_questions`).
        key: the run's name within the identity; the questions are `<key>/call-<i>`
            (approvals first, then external calls, each in the run's order).
        result: the `AgentRunResult` whose `output` is a `DeferredToolRequests`.
        agent: the agent the run resumes with; its `config_digest` is parked with the run.
        run_id: as in `berth.openai_agents.park`.
        deadline: as in `berth.openai_agents.park`.
        default_deadline: as in `berth.openai_agents.park`.
        labels: as in `berth.openai_agents.park`.

    Returns:
        The envelope as parked.

    Raises:
        TypeError: the run's output is not a `DeferredToolRequests`.
        InvalidEnvelope: it holds no call (nothing saved, nothing asked).
        InvalidKey, EnvelopeTooLarge, BackendError: as `Coordinator.suspend`.
    """
    requests = result.output
    if not isinstance(requests, DeferredToolRequests):
        raise TypeError(f"park needs a run whose output is DeferredToolRequests, got {type(requests).__name__}")
    described = _descriptions(agent)
    calls = [
        Pending(c.tool_call_id, c.tool_name, c.args_as_json_str(), kind, description=described.get(c.tool_name, ""))
        for kind, found in (("approval", requests.approvals), ("result", requests.calls))
        for c in found
    ]
    parking = _parking(store, questions, agent, default_deadline)
    envelope = parking.envelope(
        key,
        provider_state=result.all_messages_json(),
        loop_state={"approvals": [c.id for c in calls if c.kind == "approval"]},
        calls=calls,
        run_id=run_id,
        deadline=deadline,
        labels=labels,
    )
    return await parking.park(key, envelope, calls)


async def wake(
    store: Store | AsyncStore,
    questions: QuestionStore | AsyncQuestionStore,
    key: str,
    agent: Agent[Any, Any],
    *,
    default_deadline: timedelta = timedelta(days=14),
    **run_options: Any,
) -> Outcome:
    """Wake the run parked under `key`: on RESUME continue it with the stored history and `DeferredToolResults`.

    Exactly one waker among any number racing gets RESUME and runs the approved tools;
    the others get REARM or FRESH and run nothing. Each answer is applied to the call it
    was given for (bound by question id and call id). An approval's answer approves,
    edits (`ToolApproved(override_args=...)`: exactly the edited arguments) or denies
    (reject, and any free text that is not exactly an approval: fail closed) with
    `ToolDenied(reason)`; an external call's answer text is its result. A call no answer
    was given for is denied, or for an external call gets the sentence `(no answer: ...)`
    (pydantic-ai needs a result for every deferred call).

    Args:
        store: the identity's envelope store: a `berth.aio.AsyncStore` (awaited, natively async on
            PostgreSQL and Redis), or a `berth.Store` (run in a worker thread).
        questions: the identity's question store, of the same kind (`berth.aio.open_questions`).
        key: the key the run was parked under.
        agent: the agent to resume with; another configuration than the parked one's is
            drift: the run is dropped (FRESH, reason "drifted").
        **run_options: passed to `agent.run` (`deps`, `usage_limits`, ...).

    Returns:
        `Outcome(decision, result, wake)`: `result` is the resumed `AgentRunResult` on
        RESUME (park it again if its output is `DeferredToolRequests` again), else None.

    Raises:
        InvalidKey: the key breaks the key rules (before any I/O).
    """

    async def resume(woke: Wake) -> Any:
        return await _resume(agent, woke, run_options)

    return await _parking(store, questions, agent, default_deadline).resume(key, resume)


async def _resume(agent: Agent[Any, Any], woke: Wake, run_options: dict[str, Any]) -> Any:
    """Continue a RESUMEd run: its stored history, with the answers as `DeferredToolResults`."""
    assert woke.envelope is not None
    answers = answers_by_call(woke)
    loop = orjson.loads(woke.envelope.loop_state) if woke.envelope.loop_state is not None else {}
    approval_ids = set(loop.get("approvals", ()))
    results = DeferredToolResults()
    for call in woke.envelope.pending_calls:
        answer = answers.get(call.id)
        if call.id not in approval_ids:
            results.calls[call.id] = answer.text if answer is not None else NO_ANSWER
            continue
        decision = tool_decision(answer)
        if decision.kind == "approve":
            results.approvals[call.id] = True
        elif decision.kind == "edit":
            results.approvals[call.id] = ToolApproved(override_args=decision.arguments)
        else:
            results.approvals[call.id] = ToolDenied(rejection(decision.reason))
    history = ModelMessagesTypeAdapter.validate_json(woke.envelope.provider_state)
    return await agent.run(message_history=history, deferred_tool_results=results, **run_options)
