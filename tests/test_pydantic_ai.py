"""berth.pydantic_ai against the real pydantic-ai, with its own FunctionModel (no network)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import berth  # noqa: E402
import berth.pydantic_ai as bpa  # noqa: E402
from tests._frameworks import KEY, Counter, Site, assert_woken_once_through_sync_stores, make_site, race  # noqa: E402

FRESH, REARM, RESUME = berth.WakeDecision.FRESH, berth.WakeDecision.REARM, berth.WakeDecision.RESUME
SECRET_REPO = "acme/payroll-archive"


def model(calls: list[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """Asks for `calls` first; once the tools answered, replies with every result it got."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart("tools said: " + " | ".join(f"{p.content}" for p in returns))])
        return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=f"c{i}") for i, (n, a) in enumerate(calls, 1)])

    return FunctionModel(respond)


def build(
    ran: Counter, *, instructions: str = "You run ops.", calls: list[tuple[str, dict[str, Any]]] | None = None
) -> Agent[None, str | DeferredToolRequests]:
    """A fresh agent, as each process builds it: a risky tool that needs approval, one run elsewhere."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        model(calls or [("delete_repo", {"name": SECRET_REPO})]),
        output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
        instructions=instructions,
    )

    @agent.tool_plain(requires_approval=True)
    def delete_repo(name: str) -> str:
        """Delete a repository for good."""
        ran(("delete_repo", name))
        return f"deleted {name}"

    @agent.tool_plain
    def ticket_status(ticket: int) -> str:
        """Look a ticket up in the tracker (answered by a human, outside the agent)."""
        raise CallDeferred

    return agent


async def start_and_park(site: Site, ran: Counter, *, native: bool = True, **kw: Any) -> berth.Envelope:
    agent = build(ran, **kw)
    result = await agent.run("clean up the old payroll repo")
    assert isinstance(result.output, DeferredToolRequests), "the run stops for the human"
    return await site.with_handles(
        lambda store, questions: bpa.park(store, questions, KEY, result, agent=agent), native=native
    )


def wake_with(ran: Counter, **kw: Any) -> Any:
    async def wake(store: Any, questions: Any) -> bpa.Outcome:
        return await bpa.wake(store, questions, KEY, build(ran, **kw))

    return wake


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return make_site(tmp_path)


def test_park_answer_and_exactly_one_of_four_wakers_resumes(site: Site) -> None:
    ran = Counter()
    envelope = asyncio.run(start_and_park(site, ran))
    assert envelope.provider == "pydantic-ai" and envelope.config_digest == bpa.config_digest(build(ran))
    assert [(c.id, c.name, c.input_value()) for c in envelope.pending_calls] == [
        ("c1", "delete_repo", {"name": SECRET_REPO})
    ]
    assert all(SECRET_REPO.encode() not in frame for frame in site.frames().values()), "sealed at rest"

    assert asyncio.run(site.with_handles(wake_with(ran))).decision is REARM and ran.calls == []
    site.answer("approve")
    outcomes = race(site, wake_with(ran))
    decisions = [o.decision for o in outcomes]
    assert decisions.count(RESUME) == 1, decisions
    assert set(decisions) <= {RESUME, REARM, FRESH}
    assert ran.calls == [("delete_repo", SECRET_REPO)], "the approved tool ran exactly once"
    (won,) = [o for o in outcomes if o.decision is RESUME]
    assert won.result.output == f"tools said: deleted {SECRET_REPO}"
    store, questions = site.open()
    assert store.load(KEY) is None and questions.pending(f"{KEY}/call-1") is None
    assert asyncio.run(site.with_handles(wake_with(ran))).decision is FRESH


def test_a_rejected_approval_never_runs_the_tool(site: Site) -> None:
    ran = Counter()
    asyncio.run(start_and_park(site, ran))
    site.answer("deny: payroll data is kept seven years")
    outcomes = race(site, wake_with(ran))
    (won,) = [o for o in outcomes if o.decision is RESUME]
    assert ran.calls == []
    assert "payroll data is kept seven years" in won.result.output


def test_an_external_call_is_answered_with_its_result(site: Site) -> None:
    ran = Counter()
    calls = [("delete_repo", {"name": SECRET_REPO}), ("ticket_status", {"ticket": 7})]
    envelope = asyncio.run(start_and_park(site, ran, calls=calls))
    assert [c.name for c in envelope.pending_calls] == ["delete_repo", "ticket_status"]
    _, questions = site.open()
    prompts = {q.key: q.prompt for q, _ in questions.list(KEY)}
    assert "approve" in prompts[f"{KEY}/call-1"] and "result of ticket_status" in prompts[f"{KEY}/call-2"]

    site.answer("yes")
    assert asyncio.run(site.with_handles(wake_with(ran, calls=calls))).decision is REARM, "one call still unanswered"
    _, questions = site.open()
    pending = questions.pending(f"{KEY}/call-2")
    assert pending is not None
    questions.provide(f"{KEY}/call-2", pending.id, "ticket 7: closed by bob", by="bob")
    outcome = asyncio.run(site.with_handles(wake_with(ran, calls=calls)))
    assert outcome.decision is RESUME
    assert ran.calls == [("delete_repo", SECRET_REPO)]
    assert outcome.result.output == f"tools said: deleted {SECRET_REPO} | ticket 7: closed by bob"


def test_past_the_deadline_nothing_resumes(site: Site) -> None:
    ran = Counter()
    asyncio.run(start_and_park(site, ran))
    site.answer("approve")
    site.clock.advance(timedelta(days=14, seconds=1))
    outcomes = race(site, wake_with(ran))
    assert {o.decision for o in outcomes} == {FRESH}
    assert any(o.wake.reason == "expired" for o in outcomes)
    assert ran.calls == []
    store, questions = site.open()
    assert store.load(KEY, allow_expired=True) is None and questions.pending(f"{KEY}/call-1") is None


def test_a_tampered_frame_is_refused(site: Site) -> None:
    ran = Counter()
    asyncio.run(start_and_park(site, ran))
    site.answer("approve")
    site.tamper()
    outcome = asyncio.run(site.with_handles(wake_with(ran)))
    assert outcome.decision is REARM and isinstance(outcome.wake.error, berth.IntegrityError)
    assert ran.calls == [] and outcome.result is None


def test_a_changed_agent_is_drift_and_never_resumes(site: Site) -> None:
    ran = Counter()
    asyncio.run(start_and_park(site, ran))
    site.answer("approve")
    changed = "You run ops, and you may delete anything."
    assert bpa.config_digest(build(ran, instructions=changed)) != bpa.config_digest(build(ran))
    outcome = asyncio.run(site.with_handles(wake_with(ran, instructions=changed)))
    assert outcome.decision is FRESH and outcome.wake.reason == "drifted"
    assert ran.calls == []


def test_only_a_deferred_output_is_parked(site: Site) -> None:
    ran = Counter()
    agent: Agent[None, str] = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("hi")])))
    result = asyncio.run(agent.run("hello"))
    store, questions = site.open()
    with pytest.raises(TypeError, match="DeferredToolRequests"):
        asyncio.run(bpa.park(store, questions, KEY, result, agent=agent))
    assert store.load(KEY) is None and ran.calls == []


def test_sync_stores_work_too_and_interoperate(site: Site) -> None:
    ran = Counter()
    park = start_and_park(site, ran, native=True)  # parked through berth.aio, woken through sync stores
    assert_woken_once_through_sync_stores(site, park, wake_with(ran), ran, ("delete_repo", SECRET_REPO))
