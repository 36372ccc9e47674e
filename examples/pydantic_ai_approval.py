"""A pydantic-ai agent ends in DeferredToolRequests; berth parks it; humans answer; one waker resumes.

    pip install 'berth[pydantic-ai]'
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
   `berth answer 'ops/ticket-7/call-1' approve` and
   `berth answer 'ops/ticket-7/call-2' 'closed by bob'` (the tool's result);
3. four wakers, each with its own store handles, race for the run: exactly one
   gets RESUME and continues it with `agent.run(message_history=...,
   deferred_tool_results=...)` -- the approved tool runs once (rejected, never).

The script exits 1 unless exactly one waker resumed and the tool ran as answered.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import berth
import berth.pydantic_ai

IDENTITY, KEY, WAKERS = "ops-bot", "ops/ticket-7", 4
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


def open_site(url: str, keyring: str) -> tuple[berth.Store, berth.QuestionStore]:
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    return berth.open_store(url, identity=IDENTITY, sealer=sealer), berth.open_questions(
        url, identity=IDENTITY, sealer=sealer
    )


def berth_cli(*args: str) -> str:
    exe = Path(sys.executable).with_name("berth")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from berth._cli import main; main()"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"berth {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


async def main(url: str, keyring: str, answer: str) -> int:
    # 1. The agent runs until its deferred tool calls, and parks.
    agent = build_agent()
    result = await agent.run("Clean up the old payroll archive repo, if ticket 7 is closed.")
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    print(f"agent:  waits on {len(requests.approvals)} approval(s) and {len(requests.calls)} external result(s)")
    store, questions = open_site(url, keyring)
    envelope = await berth.pydantic_ai.park(store, questions, KEY, result, agent=agent)
    print(f"agent:  parked run {envelope.run_id} under {KEY!r} until {envelope.deadline:%Y-%m-%d %H:%M} UTC")

    # 2. Humans answer from the command line, in other processes: one answer per question.
    os.environ.update(BERTH_URL=url, BERTH_IDENTITY=IDENTITY, BERTH_KEYRING=keyring)
    for line in berth_cli("questions").splitlines():
        print(f"human:  {line}")
    print("human:  " + berth_cli("answer", f"{KEY}/call-1", answer, "--by", "alice"))
    print("human:  " + berth_cli("answer", f"{KEY}/call-2", "ticket 7 was closed by bob", "--by", "bob"))

    # 3. Four wakers race; exactly one resumes the run.
    outcomes: dict[str, berth.pydantic_ai.Outcome] = {}
    barrier = threading.Barrier(WAKERS)

    def waker(name: str) -> None:
        handles = open_site(url, keyring)  # its own handles, as another replica's
        barrier.wait()
        outcomes[name] = asyncio.run(berth.pydantic_ai.wake(*handles, KEY, build_agent()))

    threads = [threading.Thread(target=waker, args=(f"waker-{i}",)) for i in range(1, WAKERS + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, outcome in sorted(outcomes.items()):
        said = f": {outcome.result.output}" if outcome.result is not None else f" ({outcome.wake.reason})"
        print(f"waker:  {name}: {outcome.decision.name}{said}")

    resumed = [o for o in outcomes.values() if o.decision is berth.WakeDecision.RESUME]
    approved = berth.pydantic_ai.parse_approval(answer)[0]
    expected = ["acme/payroll-archive"] if approved else []
    print(f"summary: {len(resumed)} RESUME of {WAKERS} wakers; the tool ran {len(deleted)} time(s)")
    return 0 if len(resumed) == 1 and deleted == expected else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="berth store URL (default: SQLite in a temporary directory)")
    parser.add_argument("--answer", default="approve", help="what the human answers to the approval")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ring = os.path.join(tmp, "keys.json")
        berth.Keyring.generate().save(ring)
        sys.exit(asyncio.run(main(args.url or f"sqlite:///{tmp}/berth.db", ring, args.answer)))
