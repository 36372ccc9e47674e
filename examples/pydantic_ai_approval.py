"""A pydantic-ai agent ends in DeferredToolRequests; berth parks it; humans answer; one waker resumes.

    pip install 'berthing[pydantic-ai]'
    python examples/pydantic_ai_approval.py                       # approve, in a temporary directory
    python examples/pydantic_ai_approval.py --answer 'reject: it holds payroll records'
    python examples/pydantic_ai_approval.py --url postgresql://postgres@127.0.0.1/test

No network: the agent runs on pydantic-ai's own `FunctionModel`.

1. the model calls two deferred tools at once: `delete_repo` needs approval
   (`requires_approval=True`), `ticket_status` is answered outside the agent
   (`CallDeferred`). The run ends with `DeferredToolRequests`, and
   `berth.pydantic_ai.park` parks its message history sealed (AES-256-GCM) with
   one question per call;
2. humans answer with the command line, in other processes:
   `berth answer 'ops/ticket-7/call-1' approve --question ID` and
   `berth answer 'ops/ticket-7/call-2' 'closed by bob' --question ID` (the tool's result);
3. four wakers, each with its own store handles, race for the run: exactly one
   gets RESUME and continues it with `agent.run(message_history=...,
   deferred_tool_results=...)` -- the approved tool runs once (rejected, never).

The script exits 1 unless exactly one waker resumed and the tool ran as answered.
"""

from __future__ import annotations

from _harness import KEY, berth_answer, berth_cli, open_site, race, run, verdict
from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import berth
import berth.pydantic_ai

deleted: list[str] = []  # what the tool did, in this process


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: call both tools; once they answered, report what they said."""
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart("Done. " + " / ".join(f"{p.tool_name}: {p.content}" for p in returns))])
    return ModelResponse(
        parts=[
            ToolCallPart("delete_repo", {"name": "acme/payroll-archive"}, tool_call_id="call_1"),
            ToolCallPart("ticket_status", {"ticket": 7}, tool_call_id="call_2"),
        ]
    )


def build_agent() -> Agent[None, str | DeferredToolRequests]:
    """The agent, as every process builds it (its configuration digest must match the parked run's)."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(respond),
        output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
        instructions="You keep the org's repositories tidy.",
    )

    @agent.tool_plain(requires_approval=True)
    def delete_repo(name: str) -> str:
        """Delete a repository for good."""
        deleted.append(name)
        return f"deleted {name}"

    @agent.tool_plain
    def ticket_status(ticket: int) -> str:
        """The status of a ticket in the tracker: a human looks it up."""
        raise CallDeferred

    return agent


async def main(url: str, keyring: str, answer: str) -> int:
    # 1. The agent runs until its deferred tool calls, and parks.
    agent = build_agent()
    result = await agent.run("Clean up the old payroll archive repo, if ticket 7 is closed.")
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    print(f"agent:  waits on {len(requests.approvals)} approval(s) and {len(requests.calls)} external result(s)")
    async with open_site(url, keyring) as (store, questions):  # berth.aio handles
        envelope = await berth.pydantic_ai.park(store, questions, KEY, result, agent=agent)
    print(f"agent:  parked run {envelope.run_id} under {KEY!r} until {envelope.deadline:%Y-%m-%d %H:%M} UTC")

    # 2. Humans answer from the command line, in other processes: one answer per question.
    for line in berth_cli("questions").splitlines():
        print(f"human:  {line}")
    print("human:  " + berth_answer(f"{KEY}/call-1", answer, by="alice"))
    print("human:  " + berth_answer(f"{KEY}/call-2", "ticket 7 was closed by bob", by="bob"))

    # 3. Four wakers race; exactly one resumes the run.
    async def wake(store: berth.aio.AsyncStore, questions: berth.aio.AsyncQuestionStore) -> berth.pydantic_ai.Outcome:
        return await berth.pydantic_ai.wake(store, questions, KEY, build_agent())

    outcomes = race(url, keyring, wake)
    expected = ["acme/payroll-archive"] if berth.pydantic_ai.parse_approval(answer)[0] else []
    return verdict(outcomes, lambda result: result.output, deleted, expected)


if __name__ == "__main__":
    run(__doc__, main)
