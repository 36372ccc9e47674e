"""berth.pydantic_ai against the real pydantic-ai, with its own FunctionModel (no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import berth  # noqa: E402
import berth.pydantic_ai as bpa  # noqa: E402
from tests._frameworks import KEY, RESUME, SECRET_REPO, Counter, HitlScenarios, Site, race  # noqa: E402


def model(calls: list[tuple[str, dict[str, Any]]], second: tuple[str, dict[str, Any]] | None = None) -> FunctionModel:
    """Asks for `calls` first; once the tools answered, replies with every result it got (or, given `second`,
    asks for that call once after the first results, then replies)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        asked_second = any(
            isinstance(p, ToolCallPart) and p.tool_call_id == "c-later" for m in messages for p in m.parts
        )
        if returns and second is not None and not asked_second:
            return ModelResponse(parts=[ToolCallPart(second[0], second[1], tool_call_id="c-later")])
        if returns:
            return ModelResponse(parts=[TextPart("tools said: " + " | ".join(f"{p.content}" for p in returns))])
        return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=f"c{i}") for i, (n, a) in enumerate(calls, 1)])

    return FunctionModel(respond)


def build(
    ran: Counter,
    *,
    instructions: str = "You run ops.",
    calls: list[tuple[str, dict[str, Any]]] | None = None,
    second: tuple[str, dict[str, Any]] | None = None,
) -> Agent[None, str | DeferredToolRequests]:
    """A fresh agent, as each process builds it: a risky tool that needs approval, one run elsewhere."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        model(calls or [("delete_repo", {"name": SECRET_REPO})], second),
        output_type=[str, DeferredToolRequests],
        instructions=instructions,
    )

    @agent.tool_plain(requires_approval=True)
    def delete_repo(name: str) -> str:
        """Delete a repository for good."""
        ran(("delete_repo", name))
        return f"deleted {name}"

    @agent.tool_plain(requires_approval=True)
    def notify(channel: str) -> str:
        """Post to a channel."""
        ran(("notify", channel))
        return f"posted to {channel}"

    @agent.tool_plain
    def ticket_status(ticket: int) -> str:
        """Look a ticket up in the tracker (answered by a human, outside the agent)."""
        raise CallDeferred

    return agent


class TestPydanticAI(HitlScenarios):
    provider = "pydantic-ai"
    first_call_id = "c1"

    async def park_again(self, store: Any, questions: Any, result: Any, agent: Any) -> Any:
        assert isinstance(result.output, DeferredToolRequests), "the resumed run stops for the second approval"
        return await bpa.park(store, questions, KEY, result, agent=agent)

    def build(self, ran: Counter, **kw: Any) -> Agent[None, str | DeferredToolRequests]:
        return build(ran, **kw)

    async def start_and_park(self, site: Site, ran: Counter, *, native: bool = True, **kw: Any) -> berth.Envelope:
        agent = build(ran, **kw)
        result = await agent.run("clean up the old payroll repo")
        assert isinstance(result.output, DeferredToolRequests), "the run stops for the human"
        return await site.with_handles(
            lambda store, questions: bpa.park(store, questions, KEY, result, agent=agent), native=native
        )

    async def wake(self, store: Any, questions: Any, agent: Any) -> bpa.Outcome:
        return await bpa.wake(store, questions, KEY, agent)

    def config_digest(self, agent: Any) -> str:
        return bpa.config_digest(agent)

    def output(self, result: Any) -> str:
        return str(result.output)

    def test_a_rejected_approval_never_runs_the_tool(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("deny: payroll data is kept seven years")
        outcomes = race(site, self.wake_with(ran))
        (won,) = [o for o in outcomes if o.decision is RESUME]
        assert ran.calls == []
        assert "payroll data is kept seven years" in won.result.output

    def test_an_external_call_is_answered_with_its_result(self, site: Site) -> None:
        ran = Counter()
        calls = [("delete_repo", {"name": SECRET_REPO}), ("ticket_status", {"ticket": 7})]
        envelope = asyncio.run(self.start_and_park(site, ran, calls=calls))
        assert [c.name for c in envelope.pending_calls] == ["delete_repo", "ticket_status"]
        _, questions = site.open()
        prompts = {q.key: q.prompt for q, _ in questions.list(KEY)}
        assert "approve" in prompts[f"{KEY}/call-1"] and "result of ticket_status" in prompts[f"{KEY}/call-2"]

        site.answer("yes")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran, calls=calls)))
        assert outcome.decision is berth.WakeDecision.REARM, "one call still unanswered"
        _, questions = site.open()
        pending = questions.pending(f"{KEY}/call-2")
        assert pending is not None
        questions.provide(f"{KEY}/call-2", pending.id, "ticket 7: closed by bob", by="bob")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran, calls=calls)))
        assert outcome.decision is RESUME
        assert ran.calls == [("delete_repo", SECRET_REPO)]
        assert outcome.result.output == f"tools said: deleted {SECRET_REPO} | ticket 7: closed by bob"

    def test_only_a_deferred_output_is_parked(self, site: Site) -> None:
        ran = Counter()
        agent: Agent[None, str] = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("hi")])))
        result = asyncio.run(agent.run("hello"))
        store, questions = site.open()
        with pytest.raises(TypeError, match="DeferredToolRequests"):
            asyncio.run(bpa.park(store, questions, KEY, result, agent=agent))
        assert store.load(KEY) is None and ran.calls == []
