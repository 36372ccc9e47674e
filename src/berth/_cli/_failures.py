"""Exit codes, the one-line failures and warnings every command reports, and the terminal's width."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

__all__ = [
    "OK",
    "PIPE_CLOSED",
    "REFUSED",
    "USAGE",
    "Failure",
    "INTERRUPTED",
    "NOT_FOUND",
    "OpenArray",
    "UNAVAILABLE",
    "PipeClosed",
    "bad_usage",
    "counted",
    "log_to_stderr",
    "one_line",
    "refuse",
    "show_warning",
    "terminal_columns",
    "unreachable",
    "warn",
]

OK, REFUSED, USAGE = 0, 1, 2
PIPE_CLOSED = 128 + 13
"""A closed pipe ends a command as SIGPIPE (13) ends one: the shell's 141, not 1 (`refused`)."""
NOT_FOUND = 66
"""No store at the URL (no directory, database file or table) for a command that creates nothing:
sysexits' EX_NOINPUT. `berth setup` (or `berth park`) creates one."""
INTERRUPTED = 130
"""Ctrl-C (SIGINT): the shell's 128 + 2. A bulk command says where it stopped and how to resume."""
UNAVAILABLE = 69
"""The backend could not be reached (a server down, a refused connection, a timeout): sysexits'
EX_UNAVAILABLE, so a script can retry it and never mistake it for a refusal such as a lost claim."""

# Client errors that mean "could not reach the server", by module and class name: the CLI never
# imports a client library to recognise its errors.
_UNREACHABLE = {
    ("psycopg", "OperationalError"),  # connection refused or failed, server gone; PoolTimeout is one
    ("redis.exceptions", "ConnectionError"),
    ("redis.exceptions", "TimeoutError"),
    ("botocore.exceptions", "EndpointConnectionError"),
    ("botocore.exceptions", "ConnectTimeoutError"),
    ("google.auth.exceptions", "TransportError"),
    ("google.api_core.exceptions", "ServiceUnavailable"),
}


class OpenArray:
    """Whether stdout holds a JSON array begun and not closed: `ls --json` failing midway.

    The failure's JSON object is then written as the array's last element, and the array closed,
    so stdout stays one valid JSON document (docs/cli.md, Output).
    """

    open = False


class PipeClosed(Exception):
    """The reader of stdout went away (`berth ls | head -1`): the command ends quietly."""


class Failure(Exception):
    """A one-line refusal (exit 1) or usage/configuration error (exit 2).

    `reported`: the command already printed its `--json` document, which tells this outcome.
    `details`: more fields for the failure's JSON object (where an interrupted walk stopped).
    """

    def __init__(
        self, message: str, code: int = REFUSED, *, reported: bool = False, details: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.code = code
        self.reported = reported
        self.details = details or {}


def refuse(message: str, *, reported: bool = False) -> NoReturn:
    """Stop with exit code 1 and a one-line message (`reported`: the `--json` document told it already)."""
    raise Failure(message, REFUSED, reported=reported)


def bad_usage(message: str) -> NoReturn:
    """Stop with exit code 2 and a one-line message."""
    raise Failure(message, USAGE)


def counted(n: int, noun: str) -> str:
    """`1 envelope`, `90,000 envelopes`: the one number format of every human-readable line (separators always)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def warn(message: str) -> None:
    """One line on stderr."""
    click.echo(f"berth: warning: {one_line(message)}", err=True)


def one_line(text: object) -> str:
    """`text` on one line and safe for a terminal: whitespace runs become one space, controls are escaped."""
    from berth._text import terminal_safe  # here: `berth --help` compiles none of its patterns

    return terminal_safe(" ".join(str(text).split()))


def show_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """`warnings.showwarning` for the command line: one `berth: warning:` line."""
    warn(str(message))


@contextmanager
def log_to_stderr() -> Iterator[None]:
    """The library's log warnings, as one `berth: warning:` line each, for as long as a command runs."""
    import logging  # here: `berth --help` never imports it

    class OneLineHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warn(record.getMessage().removeprefix("berth: "))

    logger = logging.getLogger("berth")
    handler = OneLineHandler(logging.WARNING)
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


def unreachable(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, says the backend could not be reached."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, TimeoutError)):
            return True
        for kind in type(current).__mro__:
            module = kind.__module__
            if any(
                kind.__name__ == name and (module == root or module.startswith(root + "."))
                for root, name in _UNREACHABLE
            ):
                return True
        current = current.__cause__ or current.__context__
    return False


def terminal_columns() -> int:
    """The terminal's width as `shutil.get_terminal_size` decides it: COLUMNS, else stdout's terminal, else 80.

    Without importing shutil, which imports bz2 and lzma: a start-up cost of every command.
    """
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80
