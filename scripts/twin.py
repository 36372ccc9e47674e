"""Generate a sync module from its async twin, and check that every generated module is current.

berth writes a protocol's I/O shell once, async, and generates the sync shell from it (psycopg's
way: its `tools/async_to_sync.py`), so the two cannot drift. The transform works on tokens
(`tokenize`), so comments and layout survive, and the source stays plain Python that ruff and mypy
check as it is:

- `async def`, `async with`, `async for` lose `async`; `await x` becomes `x`;
- `__aenter__`, `__aexit__`, `__aiter__`, `__anext__`, `AsyncIterator`, `AsyncIterable`,
  `AsyncGenerator`, `StopAsyncIteration` and `asynccontextmanager` become their sync names, and so
  does every name of the pair's own map (`AsyncQuestionStore` -> `QuestionStore`, `arun` -> `run`),
  as whole words, in code, strings and comments alike (a dotted key, `berth.aio.open_questions`,
  can only match in strings and comments: it says how a docstring names the sync twin);
- markers, as comments, say where the two differ otherwise:

  - `stmt  # twin: sync REPLACEMENT` -- the sync module has REPLACEMENT instead of the statement
    (which may span lines; the marker ends its last line);
  - `stmt  # twin: async-only` -- the statement is left out of the sync module;
  - inside brackets (a parameter, an argument), either marker is about its own line only;
  - `# twin: sync LINE` alone on its line -- LINE is in the sync module only, at the comment's indent;
  - `# twin: async-only` alone on its line, then `# twin: end` -- the lines between are left out.

The output goes through `ruff check --fix --select I,F401` (imports sorted, the ones only the async
code used dropped) and `ruff format`, and starts with a header naming its source.

    python scripts/twin.py           regenerate every pair in TWINS
    python scripts/twin.py --check   exit 1 naming each generated module that differs, or that no pair makes
                                     any more (CI: tests/test_twins.py)
    python scripts/twin.py --diff    also print how it differs

A new pair is one row of TWINS (kept sorted by target).
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SYNC_NAMES", "TWINS", "Twin", "TwinError", "check", "generate", "main", "orphans", "transform"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Twin:
    """One generated module: `target` (sync) made from `source` (async) with `names` renamed."""

    source: str
    target: str
    names: Mapping[str, str] = field(default_factory=dict)


_QUESTIONS = {
    "AsyncBackend": "Backend",
    "AsyncQuestionStore": "QuestionStore",
    "AsyncStore": "Store",
    "_aio_store": "_store",
    "aclose": "close",
    "arun": "run",
    "berth.aio.open_questions": "berth.open_questions",
}

_SAVER_IO = {
    "AsyncQuestionStore": "QuestionStore",
    "AsyncSaverIO": "SaverIO",
    "AsyncStore": "Store",
    "_aio_questions": "_questions",
    "_aio_store": "_store",
    "berth.aio.AsyncStore": "berth.Store",
}

_COORDINATOR = {
    "AsyncCoordinator": "Coordinator",
    "AsyncQuestionsLike": "QuestionsLike",
    "AsyncStore": "Store",
    "_aio_store": "_store",
    "arun": "run",
}

_STORE = {
    "AsyncBackend": "Backend",
    "AsyncIO": "SyncIO",
    "AsyncStore": "Store",
    "aclose": "close",
    "arun": "run",
    "berth.aio.open_store": "berth.open_store",
}

_OPEN = {"AsyncBackend": "Backend", "AsyncStore": "Store", "_aio_open": "_open", "_aio_store": "_store"}

_PG_POOL = {"AsyncConnection": "Connection", "AsyncCursor": "Cursor", "AsyncLease": "Lease", "AsyncPool": "Pool"}

_AZBLOB = {
    "AsyncAzureBlobBackend": "AzureBlobBackend",
    "AsyncBackend": "Backend",
    "aclose": "close",
    "awaited on azure-storage-blob's `aio` client": "on azure-storage-blob's sync client",
}

TWINS: tuple[Twin, ...] = (
    Twin("src/berth/_aio_coordinator.py", "src/berth/_coordinator.py", _COORDINATOR),
    Twin("src/berth/_aio_open.py", "src/berth/_open.py", _OPEN),
    Twin("src/berth/_aio_questions.py", "src/berth/_questions.py", _QUESTIONS),
    Twin("src/berth/_aio_store.py", "src/berth/_store.py", _STORE),
    Twin("src/berth/backends/azblob/_aio_backend.py", "src/berth/backends/azblob/_backend.py", _AZBLOB),
    Twin("src/berth/backends/postgres/_aio_pool.py", "src/berth/backends/postgres/_pool.py", _PG_POOL),
    Twin("src/berth/langgraph/_aio_io.py", "src/berth/langgraph/_io.py", _SAVER_IO),
)
"""Every generated module, sorted by target; paths relative to the repository's root."""

SYNC_NAMES: Mapping[str, str] = {
    "AsyncGenerator": "Generator",
    "AsyncIterable": "Iterable",
    "AsyncIterator": "Iterator",
    "StopAsyncIteration": "StopIteration",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "asynccontextmanager": "contextmanager",
}
"""Renamed in every pair (a pair's own `names` come on top)."""

HEADER = "# generated from {source} by scripts/twin.py — do not edit: change the source and run the script\n"

_MARKER = re.compile(r"#\s*twin:\s*(\S+)\s?(.*)")
_ASYNC_STATEMENTS = frozenset({"def", "with", "for"})
_SKIPPED = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT})
_WORDS = frozenset({tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)})


class TwinError(Exception):
    """A source the transform refuses: an unknown or misplaced marker, an unclosed block."""


@dataclass(order=True)
class _Edit:
    start: int
    end: int
    text: str


def transform(source: str, names: Mapping[str, str] = {}, *, origin: str = "<source>") -> str:
    """The sync twin of the async module `source` (before formatting): see the module docstring."""
    renames = {**SYNC_NAMES, **names}
    words = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, sorted(renames, key=len, reverse=True))) + r")(?![\w])")
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(row: int, col: int) -> int:
        return starts[row - 1] + col

    def line_range(first: int, last: int) -> tuple[int, int]:  # the whole physical lines, newline included
        return starts[first - 1], starts[last] if last < len(starts) else len(source)

    def fail(row: int, why: str) -> TwinError:
        return TwinError(f"{origin}:{row}: {why}")

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    token_edits: list[_Edit] = []
    line_edits: list[_Edit] = []
    block: int | None = None  # the row of an open `# twin: async-only` block
    logical: int | None = None  # the first row of the logical line being read (None: between lines)
    for i, tok in enumerate(tokens):
        kind, text, (row, col), (end_row, end_col), line = tok
        if kind == tokenize.COMMENT and (marker := _MARKER.match(text)):
            what, rest = marker[1], marker[2].rstrip()
            alone = not line[:col].strip()
            if alone and logical is not None:
                raise fail(row, f"`# twin: {what}` alone inside a statement: put it at the end of a line")
            # A marker that ends a statement is about the statement; one inside brackets, about its line only.
            first = row if alone or tokens[i + 1].type == tokenize.NL else logical
            assert first is not None
            if what == "end":
                if not alone or block is None:
                    raise fail(row, "`# twin: end` without an open `# twin: async-only` block")
                line_edits.append(_Edit(*line_range(block, row), ""))
                block = None
            elif block is not None:
                raise fail(row, f"`# twin: {what}` inside the async-only block opened at line {block}")
            elif what == "async-only":
                if rest:
                    raise fail(row, "`# twin: async-only` takes nothing after it")
                if alone:
                    block = row
                else:
                    line_edits.append(_Edit(*line_range(first, row), ""))
            elif what == "sync":
                if not rest:
                    raise fail(row, "`# twin: sync` needs the sync code after it")
                head = source[slice(*line_range(first, first))]
                indent = head[: len(head) - len(head.lstrip())]
                line_edits.append(_Edit(*line_range(first, row), f"{indent}{rest}\n"))
            else:
                raise fail(row, f"unknown marker `# twin: {what}` (sync, async-only, end)")
            continue
        if kind == tokenize.NEWLINE:
            logical = None
        elif kind not in _SKIPPED and logical is None:
            logical = row
        if block is not None:
            continue
        start, end = offset(row, col), offset(end_row, end_col)
        if kind == tokenize.NAME and text == "await":
            token_edits.append(_Edit(start, offset(*tokens[i + 1].start), ""))
        elif kind == tokenize.NAME and text == "async" and tokens[i + 1].string in _ASYNC_STATEMENTS:
            token_edits.append(_Edit(start, offset(*tokens[i + 1].start), ""))
        elif kind == tokenize.NAME and text in renames:
            token_edits.append(_Edit(start, end, renames[text]))
        elif kind in _WORDS and words.search(text):
            if source[start:end] != text:  # an f-string's middle whose escapes moved it: say so, never guess
                raise fail(row, f"cannot rename inside {text!r}: write the sync text with a `# twin: sync` marker")
            token_edits.append(_Edit(start, end, words.sub(lambda m: renames[m[1]], text)))
    if block is not None:
        raise fail(block, "`# twin: async-only` block never closed with `# twin: end`")

    edits = sorted(line_edits)
    for edit in token_edits:  # a token inside a replaced or dropped line is that line's business
        if not any(e.start <= edit.start < e.end for e in line_edits):
            edits.append(edit)
    out: list[str] = []
    at = 0
    for edit in sorted(edits):
        out.append(source[at : edit.start])
        out.append(edit.text)
        at = edit.end
    out.append(source[at:])
    return "".join(out)


def _ruff(args: Sequence[str], text: str, target: str) -> str:
    command = [sys.executable, "-m", "ruff", *args, "--stdin-filename", target, "-"]
    done = subprocess.run(command, input=text, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise TwinError(f"{target}: `ruff {' '.join(args)}` failed on the generated code:\n{done.stderr}{done.stdout}")
    return done.stdout


def generate(twin: Twin, root: Path = ROOT) -> str:
    """The text `twin.target` should hold: its source transformed, imports fixed, formatted."""
    source = (root / twin.source).read_text(encoding="utf-8")
    text = HEADER.format(source=twin.source) + transform(source, twin.names, origin=twin.source)
    text = _ruff(["check", "--fix", "--select", "I,F401", "--quiet", "--exit-zero"], text, twin.target)
    return _ruff(["format", "--quiet"], text, twin.target)


def orphans(twins: Sequence[Twin] = TWINS, root: Path = ROOT) -> list[str]:
    """Modules under `root`/src whose first line says scripts/twin.py made them, but no pair of `twins` does."""
    made = {twin.target for twin in twins}
    found: list[str] = []
    for path in sorted((root / "src").rglob("*.py")):
        with path.open(encoding="utf-8") as file:
            first = file.readline()
        name = path.relative_to(root).as_posix()
        if first.startswith("# generated from ") and "by scripts/twin.py" in first and name not in made:
            found.append(name)
    return found


def check(twins: Sequence[Twin] = TWINS, root: Path = ROOT, *, diff: bool = False) -> list[str]:
    """The targets of `twins` whose file differs from what `generate` makes (missing ones included)."""
    stale: list[str] = []
    for twin in twins:
        want = generate(twin, root)
        path = root / twin.target
        have = path.read_text(encoding="utf-8") if path.exists() else ""
        if have != want:
            stale.append(twin.target)
            if diff:
                sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), twin.target))
    return stale


def main(argv: Sequence[str] | None = None, twins: Sequence[Twin] = TWINS, root: Path = ROOT) -> int:
    """The command line: regenerate every pair, or `--check` them; returns the exit code."""
    parser = argparse.ArgumentParser(description="Generate sync modules from their async twins (scripts/twin.py).")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated module differs")
    parser.add_argument("--diff", action="store_true", help="with --check, print the differences")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = check(twins, root, diff=args.diff)
            for target in stale:
                print(f"{target} differs from what scripts/twin.py generates: run python scripts/twin.py")
            lost = orphans(twins, root)
            for target in lost:
                print(f"{target} says scripts/twin.py generates it, but no pair in TWINS does: add one")
            return 1 if stale or lost else 0
        for twin in twins:
            path = root / twin.target
            text = generate(twin, root)
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {twin.target}")
    except TwinError as exc:
        print(f"twin: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
