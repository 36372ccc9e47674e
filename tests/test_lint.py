"""The tree stays clean: ruff (lint and format) on everything, mypy strict on src/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
TREES = ["src", "tests", "examples", "benchmarks", "scripts"]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        unavailable(name, "not installed: pip install -e '.[test]'")
    assert found is not None
    return found


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["ruff-check", "ruff-format"])
def test_ruff(args: list[str]) -> None:
    trees = [t for t in TREES if (ROOT / t).exists()]
    result = subprocess.run([_tool("ruff"), *args, *trees], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_mypy_strict_on_src() -> None:
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
