"""Formatting for people and for scripts: times, sizes, JSON documents, tables and progress bars."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click

import berth
from berth._text import json_terminal_safe, terminal_safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = [
    "ago",
    "console",
    "deadline_text",
    "emit_json",
    "emit_jsonl",
    "envelope_doc",
    "escape",
    "is_expired",
    "json_text",
    "labels_text",
    "listing_doc",
    "listing_table",
    "local",
    "now",
    "print_fields",
    "print_json_bytes",
    "progress",
    "rfc3339",
    "size_text",
    "span",
    "terminal_safe",
]


def now() -> datetime:
    """The current time, aware."""
    return datetime.now(timezone.utc)


def rfc3339(dt: datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z`, for JSON; with its own offset when UTC cannot hold it.

    `9999-12-31T23:59-23:59` is a deadline berth accepts, and in UTC it falls in year 10000.
    """
    if dt is None:
        return None
    try:
        return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    except OverflowError:
        return dt.isoformat()


def local(dt: datetime) -> str:
    """Local time for people: `2026-11-30 08:12:03 CET` (in its own offset when local time cannot hold it)."""
    try:
        return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except OverflowError:
        return dt.isoformat(" ")


def span(seconds: float) -> str:
    """A duration in at most two units: `45s`, `12m`, `3h 5m`, `13d 23h`."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def ago(dt: datetime, at: datetime) -> str:
    """`5s ago` or `in 14d`, relative to `at`."""
    delta = (dt - at).total_seconds()
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def is_expired(deadline: datetime | None, at: datetime) -> bool:
    """Past its deadline (strictly), as the store decides."""
    return deadline is not None and at > deadline


def deadline_text(deadline: datetime | None, at: datetime) -> str:
    """`in 13d 23h`, `expired 5s ago`, or `none`."""
    if deadline is None:
        return "none"
    return f"expired {ago(deadline, at)}" if is_expired(deadline, at) else ago(deadline, at)


def size_text(n: int) -> str:
    """`812 B`, `1.2 KiB`, `3.4 MiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def labels_text(labels: Any, *, human: bool = False) -> str:
    """`k=v k2=v2`; for people, without berth's own bookkeeping labels (`berth.*`)."""
    return " ".join(f"{k}={v}" for k, v in labels.items() if not (human and k.startswith("berth.")))


def listing_doc(item: berth.Listing) -> dict[str, Any]:
    """A listing as JSON, with the Python API's field names."""
    return {
        "key": item.key,
        "run_id": item.run_id,
        "created_at": rfc3339(item.created_at),
        "deadline": rfc3339(item.deadline),
        "size": item.size,
        "labels": dict(item.labels),
        "sealed_by": item.sealed_by,
    }


def _raw(data: bytes | None) -> Any:
    if data is None:
        return None
    return json.loads(data)


def envelope_doc(key: str, env: berth.Envelope) -> dict[str, Any]:
    """An envelope as JSON, with the Python API's field names (raw JSON fields decoded)."""
    return {
        "key": key,
        "version": env.version,
        "provider": env.provider,
        "model": env.model,
        "config_digest": env.config_digest,
        "run_id": env.run_id,
        "provider_state": _raw(env.provider_state),
        "loop_state": _raw(env.loop_state),
        "pending_calls": [{"id": c.id, "name": c.name, "input": _raw(c.input)} for c in env.pending_calls],
        "turn": env.turn,
        "remaining_turns": env.remaining_turns,
        "reason": env.reason,
        "trace_id": env.trace_id,
        "deadline": rfc3339(env.deadline),
        "created_at": rfc3339(env.created_at),
        "labels": dict(env.labels),
    }


def json_text(doc: Any, *, indent: int | None = 2) -> str:
    """`doc` as JSON that decodes to exactly `doc` and holds no character a terminal acts on."""
    separators = None if indent is not None else (",", ":")
    return json_terminal_safe(json.dumps(doc, ensure_ascii=False, indent=indent, separators=separators))


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
    """A progress bar on stderr when stderr is a terminal; yields a function that advances it."""
    if not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar: Progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def listing_table(items: Iterable[berth.Listing], at: datetime) -> Any:
    """The `ls` table: key, run id, age, deadline, size, sealed by, labels (berth's own labels hidden)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, header_style="bold")
    table.add_column("KEY", overflow="fold", ratio=3)
    table.add_column("RUN ID", overflow="fold", ratio=2)
    table.add_column("AGE", no_wrap=True)
    table.add_column("DEADLINE", no_wrap=True)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("SEALED BY", overflow="fold", ratio=2)
    table.add_column("LABELS", overflow="fold", ratio=2)
    for item in items:
        dl = deadline_text(item.deadline, at)
        style = "red" if is_expired(item.deadline, at) else ""
        table.add_row(
            escape(item.key),
            escape(item.run_id) or "-",
            span((at - item.created_at).total_seconds()),
            f"[{style}]{dl}[/]" if style else dl,
            size_text(item.size),
            escape(item.sealed_by),
            escape(labels_text(item.labels, human=True)) or "-",
        )
    return table


def escape(text: str) -> str:
    """`text` safe to print as rich markup, on a terminal: controls escaped, markup inert."""
    from rich.markup import escape as _escape

    return _escape(terminal_safe(text))


def print_fields(rows: list[tuple[str, str]]) -> None:
    """Name/value rows, names in bold."""
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in rows:
        table.add_row(name, escape(value))
    console().print(table)
