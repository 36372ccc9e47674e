"""An OpenAI Agents SDK agent stops for a tool approval; berth parks it; a human answers; one waker resumes.

    pip install 'berth[openai-agents]'
    python examples/openai_agents_approval.py                     # approve, in a temporary directory
    python examples/openai_agents_approval.py --answer 'reject: it holds payroll records'
    python examples/openai_agents_approval.py --url postgresql://postgres@127.0.0.1/test

No network: the agent runs on the SDK's own `agents.testing.ScriptedModel`, the
API key is a dummy and tracing is off.

1. the agent asks to call `delete_repo`, a tool that needs approval: the run
   stops with an interruption, and `berth.openai_agents.park` parks its
   `RunState` sealed (AES-256-GCM) with one question per interruption;
2. a human answers with the command line, in another process:
   `berth answer 'ops/ticket-7/call-1' approve`;
3. four wakers, each with its own store handles, race for the run: exactly one
   gets RESUME, applies the answer to the `RunState` and continues the run with
   `Runner.run` -- the tool runs once (or, rejected, never).

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
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-example-not-a-real-key")  # nothing reaches a provider
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402

import berth  # noqa: E402
import berth.openai_agents  # noqa: E402

set_tracing_disabled(True)

IDENTITY, KEY, WAKERS = "ops-bot", "ops/ticket-7", 4
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
    # 1. The agent runs until the tool call that needs approval, and parks.
    agent = build_agent()
    result = await Runner.run(agent, "Clean up the old payroll archive repo.")
    print(f"agent:  stopped for {len(result.interruptions)} approval(s): {result.interruptions[0].name}")
    store, questions = open_site(url, keyring)
    envelope = await berth.openai_agents.park(store, questions, KEY, result, agent=agent)
    print(f"agent:  parked run {envelope.run_id} under {KEY!r} until {envelope.deadline:%Y-%m-%d %H:%M} UTC")

    # 2. A human answers from the command line, in another process.
    os.environ.update(BERTH_URL=url, BERTH_IDENTITY=IDENTITY, BERTH_KEYRING=keyring)
    for line in berth_cli("questions").splitlines():
        print(f"human:  {line}")
    print("human:  " + berth_cli("answer", f"{KEY}/call-1", answer, "--by", "alice"))

    # 3. Four wakers race; exactly one resumes the run.
    outcomes: dict[str, berth.openai_agents.Outcome] = {}
    barrier = threading.Barrier(WAKERS)

    def waker(name: str) -> None:
        handles = open_site(url, keyring)  # its own handles, as another replica's
        barrier.wait()
        outcomes[name] = asyncio.run(berth.openai_agents.wake(*handles, KEY, build_agent()))

    threads = [threading.Thread(target=waker, args=(f"waker-{i}",)) for i in range(1, WAKERS + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, outcome in sorted(outcomes.items()):
        said = f": {outcome.result.final_output}" if outcome.result is not None else f" ({outcome.wake.reason})"
        print(f"waker:  {name}: {outcome.decision.name}{said}")

    resumed = [o for o in outcomes.values() if o.decision is berth.WakeDecision.RESUME]
    approved = berth.openai_agents.parse_approval(answer)[0]
    expected = ["acme/payroll-archive"] if approved else []
    print(f"summary: {len(resumed)} RESUME of {WAKERS} wakers; the tool ran {len(deleted)} time(s)")
    return 0 if len(resumed) == 1 and deleted == expected else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="berth store URL (default: SQLite in a temporary directory)")
    parser.add_argument("--answer", default="approve", help="what the human answers (default: approve)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ring = os.path.join(tmp, "keys.json")
        berth.Keyring.generate().save(ring)
        sys.exit(asyncio.run(main(args.url or f"sqlite:///{tmp}/berth.db", ring, args.answer)))
