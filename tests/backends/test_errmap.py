"""berth/backends/_errmap.py: the one table shape every backend maps its client's errors through."""

from __future__ import annotations

import errno
import importlib
import sqlite3
from typing import Any

import pytest

import berth
from berth.backends._errmap import ErrorMap, Row, precondition_rows


class _Lost(Exception):
    """A client's 'precondition failed'."""


class _Down(ConnectionError):
    """A client's transient failure."""


def _table(**options: Any) -> ErrorMap:
    return ErrorMap(
        "demo",
        [
            *precondition_rows(_Lost, lambda exc: True),
            Row(ValueError, berth.FormatError, "demo value for {name!r} is not a frame"),
            Row((_Lost, OSError)),
        ],
        **options,
    )


def test_the_first_matching_row_maps_and_the_message_names_backend_op_and_name() -> None:
    table = _table()
    err = table.error(_Down("reset by peer\nsecond line"), "save", "i/k")
    assert type(err) is berth.BackendError
    assert str(err) == "demo backend could not save 'i/k': _Down: reset by peer"
    assert type(table.error(ValueError("x"), "load", "i/k")) is berth.FormatError
    assert str(table.error(ValueError("x"), "load", "i/k")) == "demo value for 'i/k' is not a frame"
    # Not conditional: a lost precondition is only a failure.
    assert type(table.error(_Lost("412"), "delete", "i/k")) is berth.BackendError
    assert type(table.error(_Lost("412"), "delete", "i/k", conditional=True)) is berth.TokenMismatch
    unknown = table.error(_Lost("412"), "delete", "i/k", conditional=True, retried=True)
    assert type(unknown) is berth.BackendError and "unknown outcome" in str(unknown)
    # What no row names still comes out a BackendError, in the same words.
    assert str(table.error(KeyError("x"), "list", "i/")) == "demo backend could not list 'i/': KeyError: 'x'"
    assert table.catches == (_Lost, ValueError, OSError)


def _through(table: ErrorMap, exc: BaseException, op: str, name: str, **options: Any) -> None:
    """`exc` raised by a call, through the one idiom every backend applies its table with."""
    try:
        raise exc
    except table.catches as caught:
        raise table.error(caught, op, name, **options) from caught


def test_the_except_form_chains_what_the_table_catches_and_lets_the_rest_through() -> None:
    table = _table()
    down = _Down("reset")
    with pytest.raises(berth.BackendError) as info:
        _through(table, down, "get", "i/k")
    assert info.value.__cause__ is down and str(info.value).startswith("demo backend could not get 'i/k'")
    mine = berth.TokenMismatch("'i/k' changed since it was read")
    with pytest.raises(berth.TokenMismatch) as passed:
        _through(table, mine, "save", "i/k")  # a berth error the call raised itself: not the table's
    assert passed.value is mine
    with pytest.raises(KeyError):
        _through(table, KeyError("not a client error the table names"), "get", "i/k")


def test_retries_are_read_when_the_call_fails_from_a_hook_or_from_the_exception() -> None:
    with pytest.raises(berth.BackendError, match="unknown outcome"):
        _through(_table(), _Lost("412"), "delete", "i/k", conditional=True, retried=True)  # a retry hook's word
    told = _table(retried=lambda exc: "retried" in str(exc))
    assert type(told.error(_Lost("412"), "delete", "i/k", conditional=True)) is berth.TokenMismatch
    assert "unknown outcome" in str(told.error(_Lost("412 retried"), "delete", "i/k", conditional=True))


def test_before_runs_on_every_exception_mapped() -> None:
    seen: list[BaseException] = []
    table = _table(before=seen.append)
    exc = _Down("x")
    table.error(exc, "get", "i/k")
    assert seen == [exc]


def _client_errors() -> list[Any]:
    """(backend module, client exception, op, conditional, expected class, words in the message); a
    backend whose extra is not installed is left out."""
    cases: list[Any] = [
        ("sqlite", sqlite3.OperationalError("database or disk is full"), "save", False, berth.BackendError,
         "sqlite backend could not save 'i/k': OperationalError: database or disk is full"),
        ("file", OSError(errno.ELOOP, "Too many levels of symbolic links"), "open", False, berth.IntegrityError,
         "file backend refuses 'i/k': its file is a symlink"),
        ("file", OSError(errno.ENOTDIR, "Not a directory"), "open the directory of", False, berth.IntegrityError,
         "not a plain directory"),
        ("file", OSError(errno.ENOSPC, "No space left on device"), "write", False, berth.BackendError,
         "file backend could not write 'i/k': No space left on device"),
    ]  # fmt: skip
    if psycopg := _optional("psycopg"):
        closed = psycopg.OperationalError("server closed the connection\nmore")
        says = "postgresql backend could not load 'i/k': OperationalError: server closed"
        cases.append(("postgres", closed, "load", False, berth.BackendError, says))
    if rexc := _optional("redis.exceptions"):
        cases += [
            ("redis", rexc.ResponseError("WRONGTYPE Operation against a key"), "load", False, berth.FormatError,
             "redis value for 'i/k' is not a berth frame"),
            ("redis", rexc.ConnectionError("Connection refused"), "save", False, berth.BackendError,
             "redis backend could not save 'i/k': ConnectionError: Connection refused"),
        ]  # fmt: skip
    if botocore := _optional("botocore.exceptions"):

        def s3(code: str, status: int, retries: int = 0) -> Any:
            meta = {"HTTPStatusCode": status, "RetryAttempts": retries}
            error = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": meta}
            return botocore.ClientError(error, "DeleteObject")

        cases += [
            ("s3", s3("PreconditionFailed", 412), "delete", True, berth.TokenMismatch, "'i/k' is not at the"),
            ("s3", s3("PreconditionFailed", 412, retries=1), "delete", True, berth.BackendError, "unknown outcome"),
            ("s3", s3("PreconditionFailed", 412), "get", False, berth.BackendError, "s3 backend could not get 'i/k'"),
            ("s3", s3("SlowDown", 503), "put", False, berth.BackendError, "could not put 'i/k': SlowDown: m"),
        ]
    if gexc := _optional("google.api_core.exceptions"):
        cases += [
            ("gcs", gexc.PreconditionFailed("412"), "delete", True, berth.TokenMismatch, "'i/k' is not at the"),
            ("gcs", gexc.ServiceUnavailable("down"), "get", False, berth.BackendError, "gcs backend could not get"),
        ]
    return cases


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - that backend's extra is not installed
        return None


def _error_table(backend: str) -> ErrorMap:
    """A backend's one error table: `ERRORS` in a backend package's shared module, `_ERRORS` in a backend module."""
    shared = {"postgres": "berth.backends.postgres._sql", "redis": "berth.backends.redis._wire"}
    if backend in shared:
        table: ErrorMap = importlib.import_module(shared[backend]).ERRORS
        return table
    table = importlib.import_module(f"berth.backends.{backend}")._ERRORS
    return table


@pytest.mark.parametrize(
    ("module", "exc", "op", "conditional", "error", "says"),
    _client_errors(),
    ids=lambda v: v if isinstance(v, str) and "'" not in v and " " not in v else None,
)
def test_each_backends_table_maps_its_clients_errors(
    module: str, exc: BaseException, op: str, conditional: bool, error: type[berth.BerthError], says: str
) -> None:
    table: ErrorMap = _error_table(module)
    with pytest.raises(error) as info:
        _through(table, exc, op, "i/k", conditional=conditional)
    assert type(info.value) is error and info.value.__cause__ is exc
    assert says in str(info.value) and "\n" not in str(info.value)
    assert (info.value.identity, info.value.key) == (None, None)  # the store names them, once
