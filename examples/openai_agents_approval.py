"""An OpenAI Agents SDK agent stops for a tool approval; berth parks it; a human answers; one waker resumes.

    pip install 'berthing[openai-agents]'
    python examples/openai_agents_approval.py                     # approve, in a temporary directory
    python examples/openai_agents_approval.py --answer 'reject: it holds payroll records'
    python examples/openai_agents_approval.py --url postgresql://postgres@127.0.0.1/test

No network: the agent runs on the SDK's own `agents.testing.ScriptedModel`, the
API key is a dummy and tracing is off.

1. the agent asks to call `delete_repo`, a tool that needs approval: the run
   stops with an interruption, and `berth.openai_agents.park` parks its
   `RunState` sealed (AES-256-GCM) with one question per interruption;
2. a human answers with the command line, in another process:
   `berth answer 'ops/ticket-7/call-1' approve --question ID`;
3. four wakers, each with its own store handles, race for the run: exactly one
   gets RESUME, applies the answer to the `RunState` and continues the run with
   `Runner.run` -- the tool runs once (or, rejected, never).

The script exits 1 unless exactly one waker resumed and the tool ran as answered.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-example-not-a-real-key")  # nothing reaches a provider
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from _harness import KEY, berth_answer, berth_cli, open_site, race, run, verdict  # noqa: E402
from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402

import berth  # noqa: E402
import berth.openai_agents  # noqa: E402

set_tracing_disabled(True)

deleted: list[str] = []  # what the tool did, in this process


@function_tool(needs_approval=True)
def delete_repo(name: str) -> str:
    """Delete a repository for good."""
    deleted.append(name)
    return f"deleted {name}"


def respond(call: ModelCall) -> Any:
    """The scripted model: ask to delete the repo; once the tool answered, report what it said."""
    last = call.input[-1] if isinstance(call.input, list) and call.input else None
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return [assistant_message(f"Done. The tool said: {last.get('output')}")]
    return [function_call("delete_repo", {"name": "acme/payroll-archive"}, call_id="call_1")]


def build_agent() -> Agent[Any]:
    """The agent, as every process builds it (its configuration digest must match the parked run's)."""
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(2)])
    return Agent(name="ops", instructions="You keep the org's repositories tidy.", tools=[delete_repo], model=model)


async def main(url: str, keyring: str, answer: str) -> int:
    # 1. The agent runs until the tool call that needs approval, and parks.
    agent = build_agent()
    result = await Runner.run(agent, "Clean up the old payroll archive repo.")
    print(f"agent:  stopped for {len(result.interruptions)} approval(s): {result.interruptions[0].name}")
    async with open_site(url, keyring) as (store, questions):  # berth.aio handles
        envelope = await berth.openai_agents.park(store, questions, KEY, result, agent=agent)
    print(f"agent:  parked run {envelope.run_id} under {KEY!r} until {envelope.deadline:%Y-%m-%d %H:%M} UTC")

    # 2. A human answers from the command line, in another process.
    for line in berth_cli("questions").splitlines():
        print(f"human:  {line}")
    print("human:  " + berth_answer(f"{KEY}/call-1", answer, by="alice"))

    # 3. Four wakers race; exactly one resumes the run.
    async def wake(store: berth.aio.AsyncStore, questions: berth.aio.AsyncQuestionStore) -> berth.openai_agents.Outcome:
        return await berth.openai_agents.wake(store, questions, KEY, build_agent())

    outcomes = race(url, keyring, wake)
    expected = ["acme/payroll-archive"] if berth.openai_agents.parse_approval(answer)[0] else []
    return verdict(outcomes, lambda result: result.final_output, deleted, expected)


if __name__ == "__main__":
    run(__doc__, main)
