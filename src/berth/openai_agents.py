"""Park an OpenAI Agents SDK run that waits on tool approvals; resume it exactly once (extra `openai-agents`).

    result = await Runner.run(agent, "clean up acme/old")
    if result.interruptions:
        await berth.openai_agents.park(store, questions, "ops/ticket-7", result, agent=agent)
    ...                                   # a human: berth answer 'ops/ticket-7/call-1' approve
    outcome = await berth.openai_agents.wake(store, questions, "ops/ticket-7", agent)
    if outcome.decision is berth.WakeDecision.RESUME:
        print(outcome.result.final_output)  # the run went on; the approved tool ran once

The run's `RunState` is parked sealed, with one question per pending tool
approval, each a structured tool approval (the tool's name, its arguments as a
JSON object, the agent's name, the tool's description; it accepts approve,
reject, edit and respond). On RESUME (exactly one waker gets it), each answer is
applied to the one call it was given for: approve → `RunState.approve`; edit →
the call's arguments replaced by exactly the edited ones, then approved; reject
(or any free text that is not exactly an approval) → `RunState.reject` with the
reason going back to the model. The run continues with `Runner.run`. The agent's configuration digest (name,
instructions, model, tools, handoffs) guards the resume: a run parked under
another configuration is dropped as FRESH (reason "drifted"), never resumed.
See docs/integrations/openai-agents.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from berth._aio_questions import AsyncQuestionStore
from berth._aio_store import AsyncStore
from berth._coordinator_core import Wake
from berth._envelope import Envelope, digest_json
from berth._hitl import (
    Outcome,
    Parking,
    Pending,
    ToolDecision,
    answers_by_call,
    parse_approval,
    rejection,
    tool_decision,
)
from berth._questions import QuestionStore
from berth._store import Store

try:
    from agents import Agent, RunState
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.openai_agents needs the OpenAI Agents SDK: pip install 'berthing[openai-agents]'") from exc

if TYPE_CHECKING:
    from agents import RunResult

__all__ = ["PROVIDER", "Outcome", "config_digest", "model_name", "park", "parse_approval", "wake"]

PROVIDER = "openai-agents"
"""The envelope's `provider` for runs parked by this module."""

log = logging.getLogger("berth")

EDITABLE_SCHEMAS = frozenset({"1.21"})
"""The `RunState.to_json` schema versions whose layout an edit is applied to (the SDK has no public call to
change a pending call's arguments). A run serialized in another schema gets no edit applied: the call is
rejected, never run with other arguments than those approved. pyproject's openai-agents extra is capped below
the SDK's next release, and tests/test_other_packages.py fails on that release, naming what to check."""


def _describe(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if obj is None:
        return ""
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{getattr(obj, '__module__', '')}.{name}"


def model_name(agent: Agent[Any]) -> str:
    """The model an agent runs on, as the envelope records it: the model name, or its Model class."""
    model = agent.model
    if isinstance(model, str):
        return model
    if model is None:
        from agents.models import get_default_model

        return get_default_model()
    return str(getattr(model, "model", None) or _describe(model))


def _tool(tool: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": type(tool).__name__, "name": getattr(tool, "name", "")}
    for field in ("description", "params_json_schema", "strict_json_schema"):
        if hasattr(tool, field):
            doc[field] = getattr(tool, field)
    approval = getattr(tool, "needs_approval", None)
    doc["needs_approval"] = approval if isinstance(approval, bool) else _describe(approval)
    return doc


def config_digest(agent: Agent[Any]) -> str:
    """`sha256:` over what resuming `agent` depends on: name, instructions, model, tools, handoffs, output type.

    Callable instructions are named by their qualified name (their text is made at run time).
    """
    return digest_json(
        {
            "name": agent.name,
            "instructions": _describe(agent.instructions),
            "model": model_name(agent),
            "tools": [_tool(t) for t in agent.tools],
            "handoffs": [
                getattr(h, "name", None) or getattr(h, "agent_name", None) or _describe(h) for h in agent.handoffs
            ],
            "output_type": _describe(agent.output_type),
        }
    )


def _parking(
    store: Store | AsyncStore,
    questions: QuestionStore | AsyncQuestionStore,
    agent: Agent[Any],
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


def _calls(state: RunState[Any, Any]) -> list[Pending]:
    calls = []
    for i, item in enumerate(state.get_interruptions(), 1):
        name = item.qualified_name or item.name or "tool"
        owner = getattr(item, "agent", None)
        tools = {getattr(t, "name", None): t for t in (getattr(owner, "tools", None) or ())}
        description = getattr(tools.get(item.name), "description", "") or ""
        agent_name = getattr(owner, "name", "") or ""
        calls.append(
            Pending(
                item.call_id or f"#{i}",
                name,
                item.arguments or "{}",
                "approval",
                agent=agent_name if isinstance(agent_name, str) else "",
                description=description if isinstance(description, str) else "",
            )
        )
    return calls


def _edit(state: dict[str, Any], edits: dict[str, dict[str, Any]]) -> bool:
    """Give every function call in a serialized `RunState` whose call id is edited its new arguments.

    The call appears in the model's response, the generated items, the processed response and the
    interruption; each gets the same arguments, and the SDK's record of the call's first arguments
    is dropped so the approval registers the edited call. False (nothing changed) for a schema
    whose layout is not known (`EDITABLE_SCHEMAS`).
    """
    if not edits:
        return True
    if state.get("$schemaVersion") not in EDITABLE_SCHEMAS:
        return False
    texts = {cid: json.dumps(args, ensure_ascii=False, separators=(",", ":")) for cid, args in edits.items()}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            cid = node.get("call_id")
            if isinstance(cid, str) and cid in texts and isinstance(node.get("arguments"), str):
                node["arguments"] = texts[cid]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(state)
    context = state.get("context")
    invocations = context.get("tool_invocations") if isinstance(context, dict) else None
    if isinstance(invocations, dict):
        for cid in edits:
            invocations.pop(cid, None)
    return True


def _arguments_of(item: Any) -> Any:
    try:
        return json.loads(item.arguments or "")
    except ValueError:
        return None


async def park(
    store: Store | AsyncStore,
    questions: QuestionStore | AsyncQuestionStore,
    key: str,
    result: RunResult | RunState[Any, Any],
    *,
    agent: Agent[Any],
    run_id: str | None = None,
    deadline: datetime | None = None,
    default_deadline: timedelta = timedelta(days=14),
    labels: dict[str, str] | None = None,
    context_serializer: Callable[[Any], Any] | None = None,
) -> Envelope:
    """Park a run interrupted for tool approvals under `key`, and ask one question per approval.

    Args:
        store: the identity's envelope store: a `berth.aio.AsyncStore` (awaited, natively async on
            PostgreSQL and Redis), or a `berth.Store` (run in a worker thread).
        questions: the identity's question store, of the same kind (`berth.aio.open_questions`).
        key: the run's name within the identity; the questions are `<key>/call-<i>`.
        result: the interrupted `RunResult` (or its `RunState`).
        agent: the run's starting agent; its `config_digest` is parked with the run.
        run_id: tells successive runs of one key apart (random when None).
        deadline: after it the run never resumes (default: now + `default_deadline`).
        labels: small, non-secret strings for listings.
        context_serializer: passed to `RunState.to_json` for a non-mapping run context.

    Returns:
        The envelope as parked.

    Raises:
        InvalidEnvelope: the run has no pending approval (nothing saved, nothing asked).
        InvalidKey, EnvelopeTooLarge, BackendError: as `Coordinator.suspend`.
    """
    state = result.to_state() if hasattr(result, "to_state") else result
    calls = _calls(state)
    parking = _parking(store, questions, agent, default_deadline)
    envelope = parking.envelope(
        key,
        provider_state=state.to_json(context_serializer=context_serializer),
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
    agent: Agent[Any],
    *,
    default_deadline: timedelta = timedelta(days=14),
    context_deserializer: Callable[[Any], Any] | None = None,
    **run_options: Any,
) -> Outcome:
    """Wake the run parked under `key`: on RESUME apply the answers and continue it with `Runner.run`.

    Exactly one waker among any number racing (threads, processes, hosts) gets RESUME
    and runs the approved tools; every other gets REARM or FRESH and runs nothing.
    Each answer is applied to the call it was given for (bound by question id and call id):
    approve runs the call; edit runs it with exactly the edited arguments; reject, and any
    free text that is not exactly an approval (fail closed), does not run it and its reason
    goes to the model. A pending call no answer was given for is left pending: the resumed
    run stops for it again (park `outcome.result` again).

    Args:
        store: the identity's envelope store: a `berth.aio.AsyncStore` (awaited, natively async on
            PostgreSQL and Redis), or a `berth.Store` (run in a worker thread).
        questions: the identity's question store, of the same kind (`berth.aio.open_questions`).
        key: the key the run was parked under.
        agent: the starting agent to resume with; a configuration other than the parked
            one's is drift: the run is dropped (FRESH, reason "drifted").
        context_deserializer: passed to `RunState.from_json`.
        **run_options: passed to `Runner.run` (`run_config`, `max_turns`, `hooks`, ...).

    Returns:
        `Outcome(decision, result, wake)`: `result` is the resumed run's `RunResult` on
        RESUME (park it again if it was interrupted again), else None.

    Raises:
        InvalidKey: the key breaks the key rules (before any I/O).
    """

    async def resume(woke: Wake) -> Any:
        return await _resume(agent, woke, context_deserializer, run_options)

    return await _parking(store, questions, agent, default_deadline).resume(key, resume)


async def _resume(
    agent: Agent[Any], woke: Wake, context_deserializer: Callable[[Any], Any] | None, run_options: dict[str, Any]
) -> Any:
    """Continue a RESUMEd run: its `RunState` with each answer applied, through `Runner.run`."""
    from agents import Runner

    assert woke.envelope is not None
    answers = answers_by_call(woke)
    decisions = {call_id: tool_decision(answer) for call_id, answer in answers.items()}
    edits = {cid: d.arguments for cid, d in decisions.items() if d.kind == "edit" and d.arguments is not None}
    raw = woke.envelope.state()
    edited = isinstance(raw, dict) and _edit(raw, edits)
    state = await RunState.from_json(agent, raw, context_deserializer=context_deserializer)
    for i, item in enumerate(state.get_interruptions(), 1):
        decision = decisions.get(item.call_id or f"#{i}")
        if decision is None:
            continue  # no answer was given for this call: it stays pending, never answered by another's
        if decision.kind == "edit" and not (edited and _arguments_of(item) == decision.arguments):
            log.warning("berth: an edit of call %r could not be applied: the call is rejected", item.call_id)
            decision = ToolDecision(
                "reject", reason="berth could not apply the edited arguments, so the call did not run"
            )
        if decision.kind in ("approve", "edit"):
            state.approve(item)
        else:
            state.reject(item, rejection_message=rejection(decision.reason))
    return await Runner.run(agent, state, **run_options)
