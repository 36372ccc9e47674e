"""The tree stays clean: ruff (lint, format) on everything, mypy strict on src/, checked on tests/ benchmarks/ scripts/.

.pre-commit-config.yaml runs the same commands (checked here), so what passes before a commit
passes CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # PyYAML comes with mkdocs (the docs dependency group, part of the test group)

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
TREES = ["src", "tests", "examples", "benchmarks", "scripts"]
# pre-commit hook id -> the command CI runs (tool name, then its arguments)
COMMANDS = {
    "ruff-check": ["ruff", "check", *TREES],
    "ruff-format": ["ruff", "format", "--check", *TREES],
    "mypy": ["mypy"],
}


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        unavailable(name, "not installed: ./dev test (the test dependency group)")
    assert found is not None
    return found


@pytest.mark.parametrize("hook", ["ruff-check", "ruff-format"])
def test_ruff(hook: str) -> None:
    tool, *args = COMMANDS[hook]
    result = subprocess.run([_tool(tool), *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_mypy_strict_on_src() -> None:
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_mypy_on_tests_benchmarks_and_scripts() -> None:
    # tests/mypy.ini: every body checked, annotations optional; src/ comes from the path, as installed.
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    command = [_tool("mypy"), "--config-file", "tests/mypy.ini", "tests", "benchmarks", "scripts"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_benchmarks_import_nothing_private() -> None:
    private = re.compile(r"^\s*(from|import) berth\._", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").rglob("*.py") if private.search(p.read_text())]
    assert not offenders, f"benchmarks measure the public API only; these import berth._*: {offenders}"


def test_pre_commit_runs_what_ci_runs() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert set(hooks) == set(COMMANDS)
    for hook_id, (tool, *args) in COMMANDS.items():
        hook = hooks[hook_id]
        # the binaries `./dev test` pinned in .venv, on the whole trees, like CI (not just staged files)
        assert hook["entry"].split() == [f".venv/bin/{tool}", *args], hook_id
        assert hook["language"] == "system" and hook["pass_filenames"] is False, hook_id
