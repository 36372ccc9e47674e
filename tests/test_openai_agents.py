"""berth.openai_agents against the real OpenAI Agents SDK, with its own ScriptedModel (no network, no tracing)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-a-real-key")  # nothing may reach a provider
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import Agent, FunctionTool, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402

import berth  # noqa: E402
import berth.openai_agents as boa  # noqa: E402
from tests._frameworks import (  # noqa: E402
    KEY,
    REARM,
    RESUME,
    SECRET_REPO,
    Counter,
    HitlScenarios,
    Site,
    race,
)

set_tracing_disabled(True)


def responder(calls: list[tuple[str, dict[str, Any]]], second: tuple[str, dict[str, Any]] | None = None) -> Any:
    """The model: asks for `calls` first; once the tools answered, replies with every output it got (or, given
    `second`, asks for that call once after the first outputs, then replies)."""

    def respond(call: ModelCall) -> Any:
        items = call.input if isinstance(call.input, list) else []
        outputs = []
        for item in reversed(items):
            if not (isinstance(item, dict) and item.get("type") == "function_call_output"):
                break
            outputs.append(str(item.get("output")))
        asked_second = any(isinstance(i, dict) and i.get("call_id") == "call_later" for i in items)
        if outputs and second is not None and not asked_second:
            return [function_call(second[0], second[1], call_id="call_later")]
        if outputs:
            return [assistant_message("tools said: " + " | ".join(reversed(outputs)))]
        return [function_call(name, args, call_id=f"call_{i}") for i, (name, args) in enumerate(calls, 1)]

    return respond


def build(
    ran: Counter,
    *,
    instructions: str = "You run ops.",
    calls: list[tuple[str, dict[str, Any]]] | None = None,
    second: tuple[str, dict[str, Any]] | None = None,
) -> Agent[Any]:
    """A fresh agent, as each process builds it: a risky tool that needs approval, a harmless one."""

    @function_tool(needs_approval=True)
    def delete_repo(name: str) -> str:
        """Delete a repository for good."""
        ran(("delete_repo", name))
        return f"deleted {name}"

    @function_tool(needs_approval=True)
    def notify(channel: str) -> str:
        """Post to a channel."""
        ran(("notify", channel))
        return f"posted to {channel}"

    script = calls or [("delete_repo", {"name": SECRET_REPO})]
    model = ScriptedModel([ModelStep.respond(responder(script, second)) for _ in range(6)])
    tools: list[FunctionTool] = [delete_repo, notify]
    return Agent(name="ops", instructions=instructions, tools=tools, model=model)  # type: ignore[arg-type]


class TestOpenAIAgents(HitlScenarios):
    provider = "openai-agents"
    first_call_id = "call_1"
    agent_name = "ops"

    async def park_again(self, store: Any, questions: Any, result: Any, agent: Any) -> Any:
        assert result.interruptions, "the resumed run stops for the second approval"
        return await boa.park(store, questions, KEY, result, agent=agent)

    def build(self, ran: Counter, **kw: Any) -> Agent[Any]:
        return build(ran, **kw)

    async def start_and_park(self, site: Site, ran: Counter, *, native: bool = True, **kw: Any) -> berth.Envelope:
        agent = build(ran, **kw)
        result = await Runner.run(agent, "clean up the old payroll repo")
        assert result.interruptions, "the run stops for approval"
        return await site.with_handles(
            lambda store, questions: boa.park(store, questions, KEY, result, agent=agent), native=native
        )

    async def wake(self, store: Any, questions: Any, agent: Any) -> boa.Outcome:
        return await boa.wake(store, questions, KEY, agent)

    def config_digest(self, agent: Any) -> str:
        return boa.config_digest(agent)

    def output(self, result: Any) -> str:
        return str(result.final_output)

    def test_an_edit_the_sdk_schema_does_not_allow_is_a_rejection(
        self, site: Site, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A RunState schema berth does not know how to edit: the call never runs with other arguments."""
        monkeypatch.setattr(boa, "EDITABLE_SCHEMAS", frozenset())
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.decide("edit", arguments={"name": "acme/other"})
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == []
        assert "could not apply the edited arguments" in outcome.result.final_output

    def test_a_rejected_approval_never_runs_the_tool(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("reject: payroll data is kept seven years")
        outcomes = race(site, self.wake_with(ran))
        (won,) = [o for o in outcomes if o.decision is RESUME]
        assert ran.calls == []
        said = won.result.final_output
        assert "payroll data is kept seven years" in said and berth._answers.ANSWER_BEGIN in said

    def test_anything_but_an_approval_rejects(self, site: Site) -> None:
        ran = Counter()
        asyncio.run(self.start_and_park(site, ran))
        site.answer("hmm, let me think about it")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran)))
        assert outcome.decision is RESUME and ran.calls == []
        assert "let me think about it" in outcome.result.final_output

    def test_one_question_per_interruption_each_answered_on_its_own(self, site: Site) -> None:
        ran = Counter()
        calls = [("delete_repo", {"name": SECRET_REPO}), ("notify", {"channel": "#ops"})]
        envelope = asyncio.run(self.start_and_park(site, ran, calls=calls))
        assert [c.name for c in envelope.pending_calls] == ["delete_repo", "notify"]
        _, questions = site.open()
        prompts = {q.key: q.prompt for q, _ in questions.list(KEY)}
        assert set(prompts) == {f"{KEY}/call-1", f"{KEY}/call-2"}
        assert "delete_repo" in prompts[f"{KEY}/call-1"] and "notify" in prompts[f"{KEY}/call-2"]

        site.answer("no: not the archive")  # only the first one
        assert asyncio.run(site.with_handles(self.wake_with(ran, calls=calls))).decision is REARM
        _, questions = site.open()
        pending = questions.pending(f"{KEY}/call-2")
        assert pending is not None
        questions.provide(f"{KEY}/call-2", pending.id, "yes", by="bob")
        outcome = asyncio.run(site.with_handles(self.wake_with(ran, calls=calls)))
        assert outcome.decision is RESUME and outcome.wake.answer.by == "alice, bob"
        assert ran.calls == [("notify", "#ops")]
        said = outcome.result.final_output
        assert "not the archive" in said and "posted to #ops" in said

    def test_a_run_with_nothing_to_approve_is_not_parked(self, site: Site) -> None:
        ran = Counter()
        agent = Agent(name="ops", instructions="x", model=ScriptedModel([[assistant_message("hi")]]))
        result = asyncio.run(Runner.run(agent, "hello"))
        store, questions = site.open()
        with pytest.raises(berth.InvalidEnvelope, match="no tool call"):
            asyncio.run(boa.park(store, questions, KEY, result, agent=agent))
        assert store.load(KEY) is None and ran.calls == []
