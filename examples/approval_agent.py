"""An approval agent: park a run and ask a human, answer from another process, race two wakers.

    python examples/approval_agent.py                 # one round, in a temporary directory
    python examples/approval_agent.py --rounds 5      # five rounds
    python examples/approval_agent.py --url postgresql://postgres@127.0.0.1/test

Every step is its own process, as it would be in a deployment:

1. the agent decides it needs an approval, parks its run with `Coordinator.suspend`
   (sealed under an AES-256-GCM keyring) and asks its question, then exits;
2. an early waker finds the run unanswered: REARM;
3. a human, in another process, reads the pending question and answers it;
4. two wakers start at the same instant and race for the run: exactly one gets
   RESUME (and continues the run with the framed answer), the other REARM or FRESH.

The script exits 1 unless every round has exactly one RESUME.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import berth

IDENTITY = "deploy-bot"
PROVIDER, MODEL = "anthropic", "claude-example"
AGENT_CONFIG = {"provider": PROVIDER, "model": MODEL, "tools": ["deploy", "ask_human"]}
DIGEST = berth.digest_json(AGENT_CONFIG)  # everything resuming depends on


def open_coordinator(url: str, keyring: str) -> berth.Coordinator:
    """Open the envelope store and question store of this identity, sealed, and a coordinator over them."""
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    store = berth.open_store(url, identity=IDENTITY, sealer=sealer)
    questions = berth.open_questions(url, identity=IDENTITY, sealer=sealer)

    def validate(envelope: berth.Envelope) -> None:
        # A run parked by another model or tool set must not resume here: ConfigDrift makes it FRESH.
        berth.check_resumable(envelope, provider=PROVIDER, model=MODEL, config_digest=DIGEST)

    return berth.Coordinator(store, questions, validate=validate)


# --- the three roles, each run in its own process ---------------------------------------------------


def agent(url: str, keyring: str, key: str, build: str) -> None:
    """The agent reaches the deploy step, needs an approval, parks its run and exits."""
    coordinator = open_coordinator(url, keyring)
    question = f"Deploy build {build} to production? It changes the billing schema."
    envelope = berth.Envelope(
        provider=PROVIDER,
        model=MODEL,
        config_digest=DIGEST,
        run_id=f"deploy-{build}",
        provider_state={
            "messages": [
                {"role": "user", "content": f"Ship build {build}."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "ask_human"}]},
            ]
        },
        loop_state={"step": "awaiting-approval"},
        pending_calls=[berth.PendingCall("tu_1", "ask_human", {"question": question})],
        turn=4,
        remaining_turns=6,
        reason="awaiting approval",
        labels={"build": build},
    )
    parked = coordinator.suspend(key, envelope)
    assert parked.deadline is not None
    print(f"agent:  parked run {parked.run_id!r} under {key!r} until {parked.deadline:%Y-%m-%d}; asked: {question}")


def human(url: str, keyring: str, key: str, who: str) -> None:
    """A human reads the pending question (prompts are sealed: this needs the keyring) and answers it."""
    coordinator = open_coordinator(url, keyring)
    question = coordinator.questions.pending(key)
    assert question is not None, f"no question pending at {key!r}"
    print(f"human:  {who} reads {question.prompt!r}")
    questions: berth.QuestionStore = coordinator.questions  # type: ignore[assignment]
    given = questions.provide(key, question.id, "Approved. Ship it after 18:00 UTC.", by=who)
    print(f"human:  {who} answered question {given.question_id[:8]}… at {given.answered_at:%H:%M:%S}")


def waker(url: str, keyring: str, key: str, name: str, start_at: float) -> None:
    """Wake the key (at `start_at`, so racing wakers start together) and act on the decision."""
    coordinator = open_coordinator(url, keyring)
    time.sleep(max(0.0, start_at - time.time()))
    wake = coordinator.wake(key)
    if wake.decision is berth.WakeDecision.RESUME:
        assert wake.envelope is not None and wake.answer is not None
        state = wake.envelope.state()
        # Continue the run: the answer goes back to the model as the tool result, framed.
        state["messages"].append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": berth.frame_answer(wake.answer)}],
            }
        )
        note = f"resuming run {wake.envelope.run_id!r} at turn {wake.envelope.turn} with {wake.answer.by}'s answer"
    elif wake.decision is berth.WakeDecision.REARM:
        note = f"not mine to run now ({wake.reason}); wake again later"
    else:
        note = f"nothing to resume ({wake.reason})"
    print(json.dumps({"waker": name, "decision": wake.decision.value, "note": note}), flush=True)


# --- the orchestration --------------------------------------------------------------------------------


def _role(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *args]


def _run(*args: str) -> str:
    done = subprocess.run(_role(*args), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"{args[0]} failed:\n{done.stderr}")
    print(done.stdout, end="")
    return done.stdout


def _wakers(url: str, keyring: str, key: str, names: list[str], together: bool = False) -> list[dict[str, Any]]:
    # Racing wakers start at one instant, late enough for every waker process to be up and waiting.
    start_at = f"{time.time() + (1.0 if together else 0.0):.6f}"
    procs = [
        subprocess.Popen(_role("waker", url, keyring, key, name, start_at), stdout=subprocess.PIPE, text=True)
        for name in names
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            sys.exit(f"waker failed with exit code {proc.returncode}")
        for line in out.splitlines():
            result = json.loads(line)
            print(f"waker:  {result['waker']}: {result['decision'].upper()}: {result['note']}")
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the story `--rounds` times; exit 0 only if every race had exactly one RESUME."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="where to park (default: an SQLite file in a temporary directory)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="berth-example-") as tmp:
        url = args.url or f"sqlite:///{tmp}/berth.db"
        keyring = os.path.join(tmp, "keys.json")
        berth.Keyring.generate().save(keyring)
        resumes = []
        for round_ in range(1, args.rounds + 1):
            key = f"acme/billing#{1000 + round_}"
            print(f"--- round {round_}: {key}")
            _run("agent", url, keyring, key, str(4200 + round_))
            early = _wakers(url, keyring, key, ["early"])
            assert early[0]["decision"] == "rearm", "an unanswered run must not resume"
            _run("human", url, keyring, key, "alice")
            raced = _wakers(url, keyring, key, ["waker-A", "waker-B"], together=True)
            resumes.append(sum(1 for r in raced if r["decision"] == "resume"))
            after = _wakers(url, keyring, key, ["late"])
            assert after[0]["decision"] == "fresh", "a resumed run is gone"
        ok = all(n == 1 for n in resumes)
        print(f"summary: {args.rounds} round(s), RESUMEs per race {resumes}: {'exactly one each' if ok else 'FAILED'}")
        return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("agent", "human", "waker"):
        role, url, keyring, key, arg = sys.argv[1:6]
        if role == "agent":
            agent(url, keyring, key, build=arg)
        elif role == "human":
            human(url, keyring, key, who=arg)
        else:
            waker(url, keyring, key, name=arg, start_at=float(sys.argv[6]))
        sys.exit(0)
    sys.exit(main())
