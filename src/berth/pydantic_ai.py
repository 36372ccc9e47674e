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
call: an approval (`requires_approval=True`, `ApprovalRequired`) asks
approve/reject; an external call (`CallDeferred`, external tools) asks for the
tool's result, and the answer's text is that result. On RESUME (exactly one
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
from berth._coordinator import WakeDecision
from berth._envelope import Envelope, digest_json
from berth._hitl import Outcome, Parking, Pending, answers_by_call, parse_approval, rejection
from berth._questions import QuestionStore
from berth._store import Store

try:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.models import Model
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.pydantic_ai needs pydantic-ai: pip install 'berth[pydantic-ai]'") from exc

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


def _instructions(agent: Agent[Any, Any]) -> list[str]:
    # pydantic-ai has no public reader of an agent's instructions; its own list is read
    # defensively (absent, it contributes nothing), static text by value, functions by name.
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
    calls = [Pending(c.tool_call_id, c.tool_name, c.args_as_json_str(), "approval") for c in requests.approvals]
    calls += [Pending(c.tool_call_id, c.tool_name, c.args_as_json_str(), "result") for c in requests.calls]
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
    the others get REARM or FRESH and run nothing. An approval's answer approves
    (`approve`, `yes`, ...) or denies (`reject: <reason>`, or anything else: fail
    closed) with `ToolDenied(reason)`; an external call's answer text is its result.

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
    woke = await _parking(store, questions, agent, default_deadline).wake(key)
    if woke.decision is not WakeDecision.RESUME:
        return Outcome(woke.decision, None, woke)
    assert woke.envelope is not None
    answers = answers_by_call(woke)
    loop = orjson.loads(woke.envelope.loop_state) if woke.envelope.loop_state is not None else {}
    approval_ids = set(loop.get("approvals", ()))
    results = DeferredToolResults()
    for call_id, text in answers.items():
        if call_id in approval_ids:
            approved, reason = parse_approval(text)
            results.approvals[call_id] = True if approved else ToolDenied(rejection(reason))
        else:
            results.calls[call_id] = text
    history = ModelMessagesTypeAdapter.validate_json(woke.envelope.provider_state)
    result = await agent.run(message_history=history, deferred_tool_results=results, **run_options)
    return Outcome(WakeDecision.RESUME, result, woke)
