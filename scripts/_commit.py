"""Which commit a measurement ran on: scripts/reliability.py and benchmarks/run.py stamp it into their pages."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["measured_commit"]


def measured_commit(root: Path, generated: Sequence[str] = ()) -> str:
    """The short hash of `root`'s HEAD, with "+dirty" when the tree differs from it; "unknown" outside git.

    A change to any tracked or untracked (not ignored) file makes the tree dirty, except the
    `generated` paths (relative to `root`): the page a run rewrites is not what it measured, so
    regenerating rows piece by piece (`--merge`) does not mark the next piece dirty.
    """
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return "unknown"
        spec = [".", *(f":(exclude){path}" for path in generated)]
        status = subprocess.run(
            [*git, "status", "--porcelain", "--", *spec], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if status.returncode != 0:
        return head.stdout.strip() + "+dirty"  # a tree git cannot read is not known to be clean
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")
