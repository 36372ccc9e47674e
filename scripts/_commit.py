"""Which commit a measurement ran on: scripts/reliability.py and benchmarks/run.py stamp it into their pages.

A row cites the commit it measured, and its raw record (docs/results/) also keeps the tree
hash of `src/` at that commit: a rebase rewrites commit hashes but not the tree of code a
commit holds, so a row whose commit was rebased away can still be matched to the commit
of today's history that holds the same code (`commit_with_tree`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["commit_exists", "commit_with_tree", "measured_commit", "src_tree"]


def _git(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, input=stdin, check=False
    )


def measured_commit(root: Path, generated: Sequence[str] = ()) -> str:
    """The short hash of `root`'s HEAD, with "+dirty" when the tree differs from it; "unknown" outside git.

    A change to any tracked or untracked (not ignored) file makes the tree dirty, except the
    `generated` paths (relative to `root`): the page a run rewrites is not what it measured, so
    regenerating rows piece by piece (`--merge`) does not mark the next piece dirty.
    """
    try:
        head = _git(root, "rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return "unknown"
        spec = [".", *(f":(exclude){path}" for path in generated)]
        status = _git(root, "status", "--porcelain", "--", *spec)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if status.returncode != 0:
        return head.stdout.strip() + "+dirty"  # a tree git cannot read is not known to be clean
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def src_tree(root: Path) -> str:
    """The tree hash of `src/` at HEAD, with "+dirty" when `src/` differs from it; "unknown" outside git."""
    try:
        tree = _git(root, "rev-parse", "HEAD:src")
        if tree.returncode != 0:
            return "unknown"
        status = _git(root, "status", "--porcelain", "--", "src")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    return tree.stdout.strip() + ("+dirty" if dirty else "")


def commit_exists(root: Path, commit: str) -> bool:
    """Whether `commit` (a hash, "+dirty" allowed) names a commit in `root`'s repository."""
    name = commit.removesuffix("+dirty")
    return bool(name) and _git(root, "cat-file", "-e", f"{name}^{{commit}}").returncode == 0


def commit_with_tree(root: Path, tree: str) -> str | None:
    """The newest commit of HEAD's history whose `src/` is `tree` ("+dirty" never matches); None if none is."""
    if not tree or tree.endswith("+dirty") or tree == "unknown":
        return None
    log = _git(root, "log", "--format=%H", "HEAD", "--", "src")
    if log.returncode != 0:
        return None
    commits = log.stdout.split()
    trees = _git(root, "cat-file", "--batch-check=%(objectname)", stdin="".join(f"{c}:src\n" for c in commits))
    for commit, line in zip(commits, trees.stdout.splitlines(), strict=False):
        if line.strip() == tree:
            return commit[:7]
    return None
