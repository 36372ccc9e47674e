"""`postgresql://user@host:port/db?schema=berth&table=frames`: one row per frame, psycopg 3 with a pool.

Layout (schema and table configurable)::

    {schema}.berth_schema_version (table_name text PRIMARY KEY, version int, migrated_at timestamptz)
    {schema}.{table}_gen          a bigint sequence: every write takes the next generation
    {schema}.{table} (name text COLLATE "C" PRIMARY KEY, gen bigint, data bytea STORAGE EXTERNAL)

The generation of a row is drawn from one sequence on every write, so it never
repeats for a name, not even after a delete and re-create. A claim is
`DELETE ... WHERE name = %s AND gen = %s RETURNING gen`; a conditional write is
`UPDATE ... WHERE name = %s AND gen = %s`. Every statement is its own
transaction on a pooled autocommit connection. Listing pages through the
C-collated primary key by keyset (`name > last`), one short statement a page:
no OFFSET and no cursor held open between pages. Frames are sealed and do not
compress, so the data column is `STORAGE EXTERNAL`: no pglz work on write, and
reading a header (`substring`) fetches only the first TOAST chunk.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg import sql

from berth._errors import BackendError, BerthError, TokenMismatch
from berth._token import Token

__all__ = ["SCHEMA_VERSION", "PostgresBackend"]

SCHEMA_VERSION = 1
"""The table layout this berth creates and reads; `setup()` migrates older ones up to it."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_PAGE = 500
_INT64_MAX = 2**63 - 1
_KEEP_BYTES = 1 << 20  # a pooled cursor that moved a frame larger than this is not kept (see _Lease)
# URL query parameters that are berth's, not libpq's (libpq refuses unknown ones).
_URL_OPTIONS = {
    "schema": str,
    "table": str,
    "pool_max_size": int,
    "pool_timeout": float,
    "pool_max_idle": float,
}

# Each step moves the layout from version i to i + 1; append, never edit.
_MIGRATIONS: list[list[str]] = [
    [
        "CREATE SEQUENCE IF NOT EXISTS {schema}.{seq} AS bigint NO CYCLE",
        "CREATE TABLE IF NOT EXISTS {schema}.{table} ("
        ' name text COLLATE "C" PRIMARY KEY, gen bigint NOT NULL, data bytea NOT NULL)',
        "ALTER TABLE {schema}.{table} ALTER COLUMN data SET STORAGE EXTERNAL",
        "ALTER SEQUENCE {schema}.{seq} OWNED BY {schema}.{table}.gen",
    ],
]


def _backend_error(what: str, name: str, exc: psycopg.Error) -> BackendError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return BackendError(f"postgresql backend could not {what} {name!r}: {type(exc).__name__}: {detail}")


@contextmanager
def _mapped(what: str, name: str) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise _backend_error(what, name, exc) from exc


_IDLE_TX = psycopg.pq.TransactionStatus.IDLE


class _Lease:
    """One pooled connection and the cursors it keeps, one per statement, reused call after call.

    A cursor that runs the same statement object again keeps its adapters and
    parsed query (psycopg's cache), which a cursor made per call rebuilds: about
    30 µs of client CPU a statement. A kept cursor also keeps its last result and
    parameters until its next use, so one that moved more than `_KEEP_BYTES` is
    closed at once instead (`release`).
    """

    __slots__ = ("conn", "cursors", "since")

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn
        self.cursors: dict[str, psycopg.Cursor[Any]] = {}
        self.since = 0.0

    def cursor(self, key: str, binary: bool) -> psycopg.Cursor[Any]:
        cur = self.cursors.get(key)
        if cur is None:
            cur = self.cursors[key] = self.conn.cursor(binary=binary)
        return cur

    def release(self, key: str) -> None:
        cur = self.cursors.pop(key, None)
        if cur is not None:
            cur.close()


class _Pool:
    """Connections for one backend: at most `max_size` open at once, idle ones reused newest first.

    A connection is made in the calling thread when no idle one is alive, so the
    first call after the server comes back connects at once (no background
    reconnect schedule to wait out). An idle connection the server has closed
    (restart, `pg_terminate_backend`) is noticed without a round trip -- its
    socket is readable -- and dropped before use.

    Taking and giving back an idle connection is a `deque` pop and append
    (atomic, no lock); the condition is only taken to open, drop or wait for a
    connection. A forked child starts with an empty pool (`os.register_at_fork`):
    the parent's sockets are not the child's to use or close.
    """

    def __init__(self, conninfo: str, kwargs: dict[str, Any], max_size: int, timeout: float, max_idle: float):
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._max_size = max_size
        self._timeout = timeout
        self._max_idle = max_idle
        self._closed = False
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._idle: deque[_Lease] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._size = 0  # connections open or being opened, idle or in use
        self._waiting = 0

    def take(self) -> _Lease:
        deadline = 0.0
        while True:
            if self._closed:
                raise psycopg.OperationalError("the backend is closed")
            try:
                lease = self._idle.pop()
            except IndexError:
                pass
            else:
                conn = lease.conn
                if (
                    time.monotonic() - lease.since < self._max_idle
                    and conn.pgconn.transaction_status == _IDLE_TX
                    # an idle connection has nothing to read unless the server ended it
                    and not select.select([conn.pgconn.socket], [], [], 0)[0]
                ):
                    return lease
                self._drop(lease)
                continue
            with self._cond:
                if self._size < self._max_size:
                    self._size += 1
                    break
                self._waiting += 1  # before looking at _idle: give() appends, then reads _waiting
                try:
                    if not self._idle:
                        if not deadline:
                            deadline = time.monotonic() + self._timeout
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or (not self._cond.wait(remaining) and not self._idle):
                            raise psycopg.OperationalError(
                                f"no free connection within {self._timeout:g} s (pool_timeout)"
                            )
                finally:
                    self._waiting -= 1
        try:
            return _Lease(psycopg.connect(self._conninfo, **self._kwargs))
        except BaseException:
            self._forget()
            raise

    def give(self, lease: _Lease) -> None:
        if not self._closed and lease.conn.pgconn.transaction_status == _IDLE_TX:
            lease.since = time.monotonic()
            self._idle.append(lease)
            if self._waiting:
                with self._cond:
                    self._cond.notify()
            if self._closed:  # close() ran meanwhile and may have drained before the append
                self.close()
        else:
            self._drop(lease)

    def _drop(self, lease: _Lease) -> None:
        lease.conn.close()
        self._forget()

    def _forget(self) -> None:
        with self._cond:
            self._size -= 1
            self._cond.notify()

    def _forked(self) -> None:
        self._reset()  # the parent's connections are dropped unclosed: psycopg never closes them in a child

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        lease = self.take()
        try:
            yield lease.conn
        finally:
            self.give(lease)

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                lease = self._idle.pop()
            except IndexError:
                break
            self._drop(lease)
        with self._cond:
            self._cond.notify_all()


_POOLS: weakref.WeakSet[_Pool] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _upper_bound(prefix: str) -> str | None:
    """The least string greater than every string starting with `prefix` (code point order), or None."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code < 0x10FFFF:
            code += 1
            if 0xD800 <= code <= 0xDFFF:
                code = 0xE000
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


class PostgresBackend:
    """Frames as rows of one PostgreSQL table; safe across threads (a pool), processes and hosts.

    The table is created by `setup()`, which is idempotent and versioned, and
    which runs by itself on first use when the table is missing. A role
    without DDL rights works once `setup()` has run as one that has them.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "berth",
        table: str = "frames",
        pool_max_size: int = 10,
        pool_timeout: float = 10.0,
        pool_max_idle: float = 300.0,
        connect_timeout: int = 10,
        application_name: str = "berth",
        prepare_threshold: int | None = 5,
    ):
        for label, ident in (("schema", schema), ("table", table)):
            if not isinstance(ident, str) or not _IDENT.fullmatch(ident):
                raise BerthError(
                    f"postgresql {label} {ident!r} must be 1-48 of A-Z a-z 0-9 _, not starting with a digit"
                )
        if pool_max_size < 1 or pool_timeout <= 0:
            raise BerthError(
                f"postgresql pool_max_size {pool_max_size} and pool_timeout {pool_timeout} must be positive"
            )
        self.schema = schema
        self.table = table
        self._lock_id = int.from_bytes(
            hashlib.sha256(f"berth:{schema}.{table}".encode()).digest()[:8], "big", signed=True
        )
        with _mapped("parse the connection string for", f"{schema}.{table}"):
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
        if "application_name" not in params:
            kwargs["application_name"] = application_name
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = connect_timeout
        self._q = self._statements()
        self._ready = False
        self._ready_lock = threading.Lock()
        self._pool = _Pool(conninfo, kwargs, pool_max_size, pool_timeout, pool_max_idle)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresBackend:
        """Open `postgresql://user:pw@host:port/db?schema=...&table=...` (libpq parameters pass through)."""
        parts = urlsplit(url)
        kept = []
        for item in parts.query.split("&") if parts.query else []:
            raw_key, _, raw_value = item.partition("=")
            key, value = unquote(raw_key), unquote(raw_value)
            convert = _URL_OPTIONS.get(key)
            if convert is None:
                kept.append(item)  # a libpq parameter: passed on exactly as written
                continue
            try:
                options.setdefault(key, convert(value))
            except ValueError:
                raise BerthError(f"postgresql URL option {key}={value!r} is not a valid {convert.__name__}") from None
        conninfo = urlunsplit(parts._replace(query="&".join(kept)))
        return cls(conninfo, **options)

    # --- statements -------------------------------------------------------------------

    def _statements(self) -> dict[str, bytes]:
        ids = {
            "schema": sql.Identifier(self.schema),
            "table": sql.Identifier(self.table),
            "seq": sql.Identifier(self.table + "_gen"),
        }

        def q(text: str) -> bytes:
            return sql.SQL(text).format(**ids).as_bytes(None)

        cols = {
            "names": "name",
            "heads": "name, substring(data FROM 1 FOR %(size)s), gen, octet_length(data)",
        }
        out = {
            "version": q(
                "SELECT current_setting('server_encoding'), "
                "(SELECT version FROM {schema}.berth_schema_version WHERE table_name = %s)"
            ),
            "put": q(
                "INSERT INTO {schema}.{table} AS t (name, gen, data) VALUES (%s, nextval('{schema}.{seq}'), %s) "
                "ON CONFLICT (name) DO UPDATE SET gen = EXCLUDED.gen, data = EXCLUDED.data RETURNING t.gen"
            ),
            "put_absent": q(
                "INSERT INTO {schema}.{table} (name, gen, data) VALUES (%s, nextval('{schema}.{seq}'), %s) "
                "ON CONFLICT (name) DO NOTHING RETURNING gen"
            ),
            "put_match": q(
                "UPDATE {schema}.{table} SET gen = nextval('{schema}.{seq}'), data = %s "
                "WHERE name = %s AND gen = %s RETURNING gen"
            ),
            "get": q("SELECT data, gen FROM {schema}.{table} WHERE name = %s"),
            "delete": q("DELETE FROM {schema}.{table} WHERE name = %s AND gen = %s RETURNING gen"),
        }
        for kind, columns in cols.items():
            for first in (True, False):
                for bounded in (True, False):
                    where = "name >= %(after)s" if first else "name > %(after)s"
                    if bounded:
                        where += " AND name < %(below)s"
                    out[f"{kind}:{first}:{bounded}"] = q(
                        f"SELECT {columns} FROM {{schema}}.{{table}} WHERE {where} ORDER BY name LIMIT {_PAGE}"
                    )
        return out

    # --- migration --------------------------------------------------------------------

    def setup(self) -> int:
        """Create or migrate the schema, sequence and table; idempotent and safe to race.

        Returns:
            The schema version now in place (`SCHEMA_VERSION`).

        Raises:
            BackendError: the database refused (e.g. the role lacks CREATE on the
                database or schema), or holds a newer layout than this berth knows.
        """
        where = f"{self.schema}.{self.table}"
        with _mapped("set up", where), self._pool.connection() as conn:
            if self._installed_version(conn) == SCHEMA_VERSION:
                self._ready = True
                return SCHEMA_VERSION
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
                exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone()
                if exists is None:
                    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.berth_schema_version ("
                        "table_name text PRIMARY KEY, version integer NOT NULL, "
                        "migrated_at timestamptz NOT NULL DEFAULT now())"
                    ).format(sql.Identifier(self.schema))
                )
                row = conn.execute(self._q["version"], (self.table,)).fetchone()
                current = 0 if row is None or row[1] is None else int(row[1])
                self._check_version(current)
                for step in range(current, SCHEMA_VERSION):
                    for statement in _MIGRATIONS[step]:
                        conn.execute(
                            sql.SQL(statement).format(
                                schema=sql.Identifier(self.schema),
                                table=sql.Identifier(self.table),
                                seq=sql.Identifier(self.table + "_gen"),
                            )
                        )
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.berth_schema_version (table_name, version) VALUES (%s, %s) "
                        "ON CONFLICT (table_name) DO UPDATE SET version = EXCLUDED.version, migrated_at = now()"
                    ).format(sql.Identifier(self.schema)),
                    (self.table, SCHEMA_VERSION),
                )
        self._ready = True
        return SCHEMA_VERSION

    def _installed_version(self, conn: psycopg.Connection[Any]) -> int:
        try:
            row = conn.execute(self._q["version"], (self.table,)).fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return 0
        assert row is not None
        if row[0] not in ("UTF8", "SQL_ASCII"):
            raise BackendError(
                f"postgresql database for {self.schema}.{self.table} has encoding {row[0]}; berth needs UTF8"
            )
        version = 0 if row[1] is None else int(row[1])
        self._check_version(version)
        return version

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise BackendError(
                f"postgresql table {self.schema}.{self.table} is at schema version {version}, "
                f"newer than this berth's {SCHEMA_VERSION}: upgrade berth"
            )

    def _ensure_ready(self) -> None:
        if self._ready:
            return
        with self._ready_lock:
            if not self._ready:
                self.setup()

    # --- the seam ---------------------------------------------------------------------

    def _run(
        self, what: str, name: str, key: str, params: Any, *, binary: bool = False, large: bool = False
    ) -> tuple[Any, ...] | None:
        """Run statement `key` on a pooled connection; its first row, or None.

        `large`: the parameters hold more than `_KEEP_BYTES`, so the cursor is not kept.
        """
        pool = self._pool
        try:
            lease = pool.take()
            try:
                row = lease.cursor(key, binary).execute(self._q[key], params).fetchone()
                if large or (binary and row is not None and len(row[0]) > _KEEP_BYTES):
                    lease.release(key)
                return row
            finally:
                pool.give(lease)
        except psycopg.Error as exc:
            raise _backend_error(what, name, exc) from exc

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` with a new generation (conditionally if asked)."""
        if if_match is not None:
            if if_absent:
                raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
            if not self._is_gen(if_match):
                raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
        if not self._ready:
            self._ensure_ready()
        if if_match is not None:
            row = self._run("save", name, "put_match", (data, name, if_match.value), large=len(data) > _KEEP_BYTES)
        else:
            key = "put_absent" if if_absent else "put"
            row = self._run("save", name, key, (name, data), large=len(data) > _KEEP_BYTES)
        if row is None:
            if if_absent:
                raise TokenMismatch(f"{name!r} already exists")
            raise TokenMismatch(f"{name!r} changed since it was read")
        return Token(row[0])

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its generation, or None."""
        if not self._ready:
            self._ensure_ready()
        row = self._run("load", name, "get", (name,), binary=True)
        return None if row is None else (row[0], Token(row[1]))

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        if not self._is_gen(token):
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
        if not self._ready:
            self._ensure_ready()
        if self._run("delete", name, "delete", (name, token.value)) is None:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    @staticmethod
    def _is_gen(token: Token) -> bool:
        value = token.value
        return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= _INT64_MAX

    def _pages(self, kind: str, prefix: str, size: int = 0) -> Iterator[tuple[Any, ...]]:
        # One short statement per page, each on whatever pooled connection is
        # free: nothing stays open between pages, so a slow consumer holds no
        # snapshot, lock or connection.
        below = _upper_bound(prefix)
        params: dict[str, Any] = {"after": prefix, "below": below, "size": size}
        first = True
        self._ensure_ready()
        while True:
            query = self._q[f"{kind}:{first}:{below is not None}"]
            with _mapped("list", prefix), self._pool.connection() as conn:
                rows = conn.execute(query, params, binary=True).fetchall()
            yield from rows
            if len(rows) < _PAGE:
                return
            params["after"] = rows[-1][0]
            first = False

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix`, in name order, a page at a time."""
        for row in self._pages("names", prefix):
            yield row[0]

    def heads(self, prefix: str, size: int) -> Iterator[tuple[str, bytes, Token, int]]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`."""
        for name, head, gen, full in self._pages("heads", prefix, size):
            yield name, head, Token(int(gen)), int(full)

    def close(self) -> None:
        """Close the idle connections; connections in use close when their call returns."""
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.schema}.{self.table})"
