"""The command line's output: JSON documents on stdout, the `ls` table, fields, progress bars.

Times, sizes and the JSON documents of listings and envelopes are `berth._format`'s (the inbox
shows them too).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click
import orjson

import berth
from berth._cli._failures import OpenArray, PipeClosed, terminal_columns
from berth._format import deadline_text, is_expired, labels_text, size_text, span
from berth._text import json_terminal_safe, terminal_safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = [
    "SHORT_ID",
    "console",
    "emit_json",
    "emit_json_stream",
    "emit_jsonl",
    "emit_jsonl_stream",
    "escape",
    "json_text",
    "ListingTable",
    "Lines",
    "listing_cells",
    "print_listing",
    "print_fields",
    "print_rows",
    "short_ids",
    "stdout_is_terminal",
    "print_json_bytes",
    "progress",
    "terminal_safe",
]


def json_text(doc: Any, *, indent: int | None = 2) -> str:
    """`doc` as JSON that decodes to exactly `doc` and holds no character a terminal acts on."""
    if indent is None:  # one line (--jsonl): orjson writes the very text json.dumps would, several times faster
        return json_terminal_safe(orjson.dumps(doc).decode())
    return json_terminal_safe(json.dumps(doc, ensure_ascii=False, indent=indent))


def print_json_bytes(data: bytes) -> None:
    """Raw JSON bytes pretty-printed for people, highlighted, with nothing a terminal would act on."""
    from rich.highlighter import JSONHighlighter
    from rich.text import Text

    console().print(JSONHighlighter()(Text(json_text(json.loads(data)))), soft_wrap=True)


def emit_json(doc: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json_text(doc))


def emit_jsonl(doc: Any) -> None:
    """One JSON object on one line of stdout."""
    click.echo(json_text(doc, indent=None))


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); plain text when it is not a terminal."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


@contextmanager
def progress(label: str, total: int | None) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr when stderr is a terminal; yields a function that advances it.

    It shows done of `total` (`None`: not known) with thousands separators, the rate, and the time.
    """
    if not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class Counts(ProgressColumn):
        def render(self, task: Task) -> Text:
            total = "?" if task.total is None else f"{int(task.total):,}"
            rate = f"{task.speed:,.0f}/s" if task.speed else "-/s"
            return Text(f"{int(task.completed):,}/{total} {rate}")

    bar: Progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        Counts(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


class Lines:
    """Text for stdout, written a batch of lines at a time.

    One write per line made `berth ls --jsonl` 3-4× slower than the listing under it.
    The first batch goes out early (after `first` lines, or `wait` seconds after the last
    write), so the first rows of a long listing are on screen at once.
    """

    def __init__(self, *, first: int = 50, batch: int = 1000, wait: float = 0.2):
        self._lines: list[str] = []
        self._due = first
        self._batch = batch
        self._wait = wait
        self._last = time.monotonic()

    def add(self, line: str) -> None:
        """One line (its newline added)."""
        self._lines.append(line)
        if len(self._lines) >= self._due or time.monotonic() - self._last >= self._wait:
            self.flush()

    def extend(self, lines: Iterable[str]) -> None:
        """Several lines."""
        self._lines.extend(lines)
        if len(self._lines) >= self._due or time.monotonic() - self._last >= self._wait:
            self.flush()

    def flush(self) -> None:
        """Write what is held, and flush stdout."""
        if self._lines:
            self._lines.append("")
            sys.stdout.write("\n".join(self._lines))
            self._lines.clear()
        sys.stdout.flush()
        self._due = self._batch
        self._last = time.monotonic()


def emit_json_stream(docs: Iterable[Any]) -> None:
    """`docs` as one JSON array, streamed: the very text `emit_json(list(docs))` writes, in flat memory."""
    out = Lines()
    held = None  # each element is written once the next shows whether it takes a comma
    try:
        for doc in docs:
            out.add("[" if held is None else held + ",")
            held = "  " + json_text(doc).replace("\n", "\n  ")  # JSON strings hold no raw newline: only layout moves
    except (BrokenPipeError, PipeClosed):
        raise
    except BaseException:  # a failure (or Ctrl-C) midway: its JSON object follows as the last element
        if held is not None:
            out.add(held + ",")
            out.flush()
            OpenArray.open = True
        raise
    if held is None:
        out.add("[]")
    else:
        out.add(held)
        out.add("]")
    out.flush()


def emit_jsonl_stream(docs: Iterable[Any]) -> None:
    """Each of `docs` as one JSON object on one line of stdout, batched; a failure midway writes
    out the lines before it first (the failure's object is then the last line)."""
    out = Lines()
    try:
        for doc in docs:
            out.add(json_text(doc, indent=None))
    except (BrokenPipeError, PipeClosed):
        raise
    except BaseException:
        out.flush()
        raise
    out.flush()


# title, and how the column gives way on a narrow terminal: its share of the shrinking (its cells
# fold onto more lines), or 0 (it never shrinks: a longer cell pushes the row on)
_COLUMNS = (
    ("KEY", 3),
    ("RUN ID", 2),
    ("AGE", 0),
    ("DEADLINE", 0),
    ("SIZE", 0),
    ("SEALED BY", 2),
    ("LABELS", 2),
)
_FOLDING = tuple(i for i, (_, share) in enumerate(_COLUMNS) if share)
_DEADLINE, _SIZE = 3, 4  # red when expired; right-aligned
_GAP = "  "
_MIN_FOLD = 6


def _cells(text: str) -> int:
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _chop(text: str, width: int) -> Sequence[str]:
    if text.isascii():
        return [text[i : i + width] for i in range(0, len(text), width)] or [""]
    from rich.cells import chop_cells

    return chop_cells(text, width) or [""]


def listing_cells(item: berth.Listing, at: datetime) -> tuple[list[str], bool]:
    """A listing's table cells (terminal-safe; berth's own labels hidden) and whether it is expired."""
    return [
        terminal_safe(item.key),
        terminal_safe(item.run_id) or "-",
        span((at - item.created_at).total_seconds()),
        deadline_text(item.deadline, at),
        size_text(item.size),
        terminal_safe(item.sealed_by),
        terminal_safe(labels_text(item.labels, human=True)) or "-",
    ], is_expired(item.deadline, at)


def column_widths(page: Sequence[Sequence[str]], width: int) -> list[int]:
    """Column widths that fit `page` (the first rows) into `width` cells: the wide columns fold, by their shares."""
    widths = [max([_cells(title)] + [_cells(row[i]) for row in page]) for i, (title, _) in enumerate(_COLUMNS)]
    room = width - len(_GAP) * (len(_COLUMNS) - 1)
    while sum(widths) > room:
        shrinkable = [i for i in _FOLDING if widths[i] > _MIN_FOLD]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i] / _COLUMNS[i][1])
        widths[widest] -= 1
    return widths


class ListingTable:
    """The `ls` table, printed row by row as listings stream in: memory flat however many there are.

    Column widths come from the first page of rows and stay fixed; a later cell wider than
    its column folds onto more lines (key, run id, sealed by, labels) or pushes the row on
    (age, deadline, size). Header in bold and expired deadlines in red on a colour terminal.
    """

    def __init__(self, page: Sequence[Sequence[str]], width: int, *, color: bool, rule: str = "\u2500"):
        self.widths = column_widths(page, width)
        self._bold, self._red, self._reset = ("\x1b[1m", "\x1b[31m", "\x1b[0m") if color else ("", "", "")
        self._rule = rule
        self._folds = [bool(share) for _, share in _COLUMNS]
        self._format = _GAP.join(
            f"{{:{'>' if i == _SIZE else '<'}{w}}}" for i, w in enumerate(self.widths)
        ).format  # for rows of ASCII text, where a character is a cell

    def header(self) -> list[str]:
        """The column titles and the rule under them."""
        line = _GAP.join(title.ljust(w) for (title, _), w in zip(_COLUMNS, self.widths, strict=True)).rstrip()
        rule = self._rule * (sum(self.widths) + len(_GAP) * (len(_COLUMNS) - 1))
        return [f"{self._bold}{line}{self._reset}", rule]

    def row(self, cells: Sequence[str], expired: bool = False) -> list[str]:
        """The lines of one row (more than one where a cell folds)."""
        plain = "".join(cells).isascii()  # then a character is a cell, and str.format pads at C speed
        measure = len if plain else _cells
        columns = [
            _chop(cell, w) if folds and measure(cell) > w else (cell,)
            for cell, w, folds in zip(cells, self.widths, self._folds, strict=True)
        ]
        if plain and not (expired and self._red):
            return [self._format(*parts).rstrip() for parts in itertools.zip_longest(*columns, fillvalue="")]
        lines = [self._line(list(parts), plain, False) for parts in itertools.zip_longest(*columns, fillvalue="")]
        lines[0] = self._line([column[0] for column in columns], plain, expired)
        return lines

    def _line(self, cells: list[str], plain: bool, expired: bool) -> str:
        if expired and self._red:
            cells[_DEADLINE] = f"{self._red}{cells[_DEADLINE]}{self._reset}"
            pads = [w - _cells(cell) for cell, w in zip(cells, self.widths, strict=True)]
            pads[_DEADLINE] = self.widths[_DEADLINE] - len(cells[_DEADLINE]) + len(self._red) + len(self._reset)
        elif plain:
            return self._format(*cells).rstrip()
        else:
            pads = [w - _cells(cell) for cell, w in zip(cells, self.widths, strict=True)]
        out = [cell + " " * pad for cell, pad in zip(cells, pads, strict=True)]
        out[_SIZE] = " " * pads[_SIZE] + cells[_SIZE]
        return _GAP.join(out).rstrip()


def print_listing(items: Iterable[berth.Listing], at: datetime, limit: int | None) -> tuple[int, int]:
    """Stream the `ls` table of `items` to stdout, the first `limit` rows; returns (rows shown, listings in all).

    The first page (at most 50 rows) sets the column widths and is on screen at once; past
    `limit` the listings are only counted.
    """
    rows = iter(items)
    first = min(50, limit) if limit is not None else 50
    page = [listing_cells(item, at) for item in itertools.islice(rows, first)]
    if not page:
        return 0, 0
    if not stdout_is_terminal():  # a pipe: a line per row, tab-separated, never folded
        out = Lines(first=len(page) + 1)
        out.add("\t".join(title for title, _ in _COLUMNS))
        out.extend("\t".join(cells) for cells, _ in page)
        shown = len(page)
        for item in rows if limit is None else itertools.islice(rows, limit - shown):
            out.add("\t".join(listing_cells(item, at)[0]))
            shown += 1
        out.flush()
        return shown, shown + sum(1 for _ in rows)
    width = terminal_columns()
    utf8 = (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "") == "utf8"
    table = ListingTable([cells for cells, _ in page], width, color=_color(sys.stdout), rule="\u2500" if utf8 else "-")
    out = Lines(first=len(page) + 2)
    for line in table.header():
        out.add(line)
    shown = 0
    for cells, expired in page:
        out.extend(table.row(cells, expired))
        shown += 1
    out.flush()
    for item in rows if limit is None else itertools.islice(rows, limit - shown):
        out.extend(table.row(*listing_cells(item, at)))
        shown += 1
    out.flush()
    return shown, shown + sum(1 for _ in rows)


def stdout_is_terminal() -> bool:
    """Whether a person reads stdout: aligned tables then; in a pipe, one tab-separated line per row."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


def print_rows(titles: Sequence[str] | None, rows: Iterable[Sequence[str]]) -> None:
    """A table for a pipe: the titles, then one line per row, cells tab-separated (terminal-safe cells hold no tab)."""
    out = Lines()
    if titles is not None:
        out.add("\t".join(titles))
    out.extend("\t".join(cells) for cells in rows)
    out.flush()


SHORT_ID = 8
"""The fewest characters of an id a terminal shows, and of a prefix a command accepts for one."""


def short_ids(ids: Iterable[str]) -> dict[str, str]:
    """Each id as its shortest prefix (at least SHORT_ID characters) that no other of `ids` starts with."""
    unique = sorted(set(ids))

    def shared(a: str, b: str) -> int:  # the length of their common prefix
        return next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    shortest = {}
    for n, i in enumerate(unique):  # in sorted order, the ids sharing most with i are its neighbours
        near = [shared(i, unique[m]) for m in (n - 1, n + 1) if 0 <= m < len(unique)]
        shortest[i] = i[: max(SHORT_ID, max(near, default=0) + 1)]
    return shortest


def _color(stream: Any) -> bool:
    """Whether to colour `stream`: a terminal, unless NO_COLOR or TERM=dumb; FORCE_COLOR forces it (as rich decides)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


def escape(text: str) -> str:
    """`text` safe to print as rich markup, on a terminal: controls escaped, markup inert."""
    from rich.markup import escape as _escape

    return _escape(terminal_safe(text))


def print_fields(rows: list[tuple[str, str]]) -> None:
    """Name/value rows, names in bold; in a pipe, `name<TAB>value` lines."""
    if not stdout_is_terminal():
        print_rows(None, ((name, terminal_safe(value)) for name, value in rows))
        return
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in rows:
        table.add_row(name, escape(value))
    console().print(table)
