"""The worked examples run as their docs say, with one command, and show what they claim."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_approval_agent_resumes_exactly_once_per_race() -> None:
    rounds = 2
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "approval_agent.py"), "--rounds", str(rounds)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for round_ in out.split("--- round ")[1:]:
        decisions = re.findall(r"^waker:  (\S+): (\w+):", round_, re.MULTILINE)
        assert decisions[0] == ("early", "REARM"), decisions
        raced = [d for name, d in decisions if name.startswith("waker-")]
        assert len(raced) == 2 and raced.count("RESUME") == 1, raced
        assert set(raced) <= {"RESUME", "REARM", "FRESH"}
        assert decisions[-1] == ("late", "FRESH"), decisions
        assert "alice answered question" in round_
    assert out.count("--- round ") == rounds
    assert f"summary: {rounds} round(s), RESUMEs per race [1, 1]: exactly one each" in out
    assert "Warning" not in done.stderr, done.stderr  # sealed: no plaintext warning


# A model provider the framework examples would reach if anything tried: a closed local port, a fake key.
NO_PROVIDER = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-test-not-a-real-key"}


def run_example(name: str, *args: str) -> str:
    env = {**os.environ, **NO_PROVIDER}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stderr, done.stderr  # sealed: no plaintext warning
    return done.stdout


def test_openai_agents_approval_resumes_once_and_runs_the_tool_once() -> None:
    out = run_example("openai_agents_approval.py")
    assert "agent:  stopped for 1 approval(s): delete_repo" in out
    assert "ops/ticket-7/call-1" in out and "as alice" in out
    assert (
        len(re.findall(r"^waker:  waker-\d: RESUME: Done\. The tool said: deleted acme/payroll-archive$", out, re.M))
        == 1
    )
    assert "summary: 1 RESUME of 4 wakers; the tool ran 1 time(s)" in out


def test_pydantic_ai_approval_rejected_never_runs_the_tool() -> None:
    out = run_example("pydantic_ai_approval.py", "--answer", "reject: it holds payroll records")
    assert "agent:  waits on 1 approval(s) and 1 external result(s)" in out
    assert "ops/ticket-7/call-1" in out and "ops/ticket-7/call-2" in out
    assert len(re.findall(r"^waker:  waker-\d: RESUME: ", out, re.M)) == 1
    assert "it holds payroll records" in out and "ticket_status: ticket 7 was closed by bob" in out
    assert "summary: 1 RESUME of 4 wakers; the tool ran 0 time(s)" in out


def test_langgraph_approval_parks_the_interrupt_and_resumes_once() -> None:
    out = run_example("langgraph_approval.py")
    assert "graph:  paused on 1 interrupt(s)" in out and "asked:  langgraph/ops~2Fticket-7/~/q/" in out
    assert len(re.findall(r"^resumer: resumer-\d: deleted acme/old$", out, re.M)) == 1
    assert "summary: 1 resume of 4 resumers; the tool ran 1 time(s)" in out


def test_langgraph_approval_rejected_never_runs_the_tool() -> None:
    out = run_example("langgraph_approval.py", "--answer", "reject: it holds payroll records")
    assert len(re.findall(r"^resumer: resumer-\d: rejected: it holds payroll records$", out, re.M)) == 1
    assert "summary: 1 resume of 4 resumers; the tool ran 0 time(s)" in out


def test_a2a_approval_parks_the_task_and_a_new_server_completes_it_once() -> None:
    out = run_example("a2a_approval.py")
    assert re.search(r"^server A: task \S+ is TASK_STATE_INPUT_REQUIRED: waiting for a maintainer$", out, re.M)
    assert "as alice (approve)" in out
    assert re.search(r"^server B: task \S+ is TASK_STATE_COMPLETED: deleted acme/old \(alice approved\)$", out, re.M)
    assert "server C: refused: " in out
    assert "summary: task TASK_STATE_COMPLETED once; the tool ran 1 time(s)" in out


def test_mcp_approval_parks_the_task_and_a_restarted_server_completes_it_once() -> None:
    out = run_example("mcp_approval.py")
    assert re.search(r"^server A: task \S+ is working: waiting for maintainers to answer$", out, re.M)
    assert "server A: process exited" in out and "as alice (approve)" in out
    assert re.search(r"^server B: task \S+ is completed: deleted acme/old \(alice approved\)$", out, re.M)
    assert re.search(r"^server C: task \S+ is completed: deleted acme/old \(alice approved\)$", out, re.M)
    assert "summary: task completed once; the tool ran 1 time(s)" in out
