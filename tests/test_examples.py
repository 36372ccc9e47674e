"""The worked examples run as their docs say, with one command, and show what they claim."""

from __future__ import annotations

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
