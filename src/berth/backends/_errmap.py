"""One shape of error mapping for every backend: a table from client errors to berth errors.

Each backend module declares one `ErrorMap`, rows of (client exception types, and
optionally a predicate) -> (berth error class, message), tried in order, first match
wins: the shape of httpx's `map_httpcore_exceptions`. Every backend applies its table
one way, a plain `except` in front of `error`:

    try:
        row = client.call(...)
    except _ERRORS.catches as exc:
        raise _ERRORS.error(exc, "save", name) from exc

Nothing is made per call unless the call fails. (A `with _ERRORS.mapped(...)` form was
dropped: its object and `__exit__` cost 0.5-1.8 us of CPU per call, measured, where the
`except` costs nothing over the call itself, and two forms were two things to read.) A call
whose client retries conditional calls passes `conditional=True` and, read once the
call has failed, `retried=` (GCS's retry hook).

A message reads `{backend} backend could not {op} {name!r}: {detail}` unless its row
says otherwise; the backend names its storage name, the store adds the identity and
key once. Only what `catches` names is mapped: a berth error the `try` raised itself
passes through as it was; `error` maps whatever it is given, to `BackendError` when
no row matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from berth._errors import BackendError, BerthError, TokenMismatch

__all__ = ["COULD_NOT", "Call", "ErrorMap", "Row", "described", "precondition_rows"]

COULD_NOT = "{backend} backend could not {op} {name!r}: {detail}"
"""The message of every row that does not say otherwise."""

_LOST = "{name!r} is not at the generation given ({op}: {detail})"
_UNKNOWN = (
    "{backend} backend could not {op} {name!r}: unknown outcome: it was retried after a transient error and "
    "then found its precondition gone ({detail}); an earlier attempt may have succeeded"
)


class Call(NamedTuple):
    """What a row's predicate may consider besides the exception: the failed call."""

    op: str
    name: str
    conditional: bool
    """The call carried a precondition (a put's if-match or if-absent, a delete's token)."""
    retried: bool
    """The client retried the call after a transient error: an earlier attempt may have applied."""


Types = type[BaseException] | tuple[type[BaseException], ...]


class Row(NamedTuple):
    """One line of a table: exceptions of `catch` (for which `when` holds) become `error`, saying `says`.

    `says` is formatted with `backend`, `op`, `name` and `detail`.
    """

    catch: Types
    error: type[BerthError] = BackendError
    says: str = COULD_NOT
    when: Callable[[BaseException, Call], bool] | None = None


def described(exc: BaseException) -> str:
    """The default detail: the exception's type and the first line of its message (at most 200 characters)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


class ErrorMap:
    """One backend's table of client errors: `catches` for the `except`, `error` for what it raises."""

    __slots__ = ("backend", "catches", "rows", "_detail", "_retried", "_before")

    def __init__(
        self,
        backend: str,
        rows: Iterable[Row],
        *,
        detail: Callable[[BaseException], str] = described,
        retried: Callable[[BaseException], bool] | None = None,
        before: Callable[[BaseException], None] | None = None,
    ):
        """Args:
        backend: the name messages start with (`sqlite`, `redis`, ...).
        rows: tried in order; the first whose `catch` and `when` hold maps the exception.
        detail: what a message says of the exception (default: `described`).
        retried: whether the client retried a failed call, read from its exception (S3's).
        before: run on every exception mapped, first (GCS closes the response it carries).
        """
        self.backend = backend
        self.rows = tuple(rows)
        catches: list[type[BaseException]] = []
        for row in self.rows:
            for kind in row.catch if isinstance(row.catch, tuple) else (row.catch,):
                if kind not in catches:
                    catches.append(kind)
        self.catches: tuple[type[BaseException], ...] = tuple(catches)
        """Every exception type the table maps: what an `except` in front of `error` names."""
        self._detail = detail
        self._retried = retried
        self._before = before

    def error(
        self, exc: BaseException, op: str, name: str, *, conditional: bool = False, retried: bool = False
    ) -> BerthError:
        """The berth error that `exc`, raised by the call `op` on `name`, becomes (the caller raises it `from exc`)."""
        if self._before is not None:
            self._before(exc)
        call = Call(op, name, conditional, retried or (self._retried is not None and self._retried(exc)))
        for row in self.rows:
            if isinstance(exc, row.catch) and (row.when is None or row.when(exc, call)):
                return row.error(self._say(row.says, exc, call))
        return BackendError(self._say(COULD_NOT, exc, call))

    def _say(self, says: str, exc: BaseException, call: Call) -> str:
        return says.format(backend=self.backend, op=call.op, name=call.name, detail=self._detail(exc))


def precondition_rows(catch: Types, is_lost: Callable[[BaseException], bool]) -> tuple[Row, Row]:
    """The two rows of a store whose client retries conditional calls (S3, GCS), in this order.

    A conditional call that finds its precondition gone (`is_lost`) lost the race
    (`TokenMismatch`), unless the client had retried it after a transient error: an
    earlier attempt may then have applied, so the outcome is unknown (`BackendError`),
    never a lost claim.
    """
    return (
        Row(catch, BackendError, _UNKNOWN, lambda exc, call: call.conditional and call.retried and is_lost(exc)),
        Row(catch, TokenMismatch, _LOST, lambda exc, call: call.conditional and is_lost(exc)),
    )
