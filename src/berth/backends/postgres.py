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

import asyncio
import hashlib
import re
import struct
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg import sql

from berth._errors import BackendError, BerthError, TokenMismatch
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends import Backend
from berth.backends._aio import AsyncBackend
from berth.backends._bulk import FRAME_BATCH, Frame, Head, bound
from berth.backends._errmap import ErrorMap, Row
from berth.backends._pgpool import KEEP_BYTES, AsyncPool, Pool

__all__ = ["SCHEMA_VERSION", "AsyncPostgresBackend", "PostgresBackend"]

SCHEMA_VERSION = 1
"""The table layout this berth creates and reads; `setup()` migrates older ones up to it."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_PAGE = 500
_INT64_MAX = 2**63 - 1
_WHOLE = LARGE_FRAME  # a get returns a frame up to this size in its one row; a larger one is read in pieces
_PIECE = 2 << 20  # bytes per ranged read of a large frame (libpq holds about three times this meanwhile)
_COPY_HEAD = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">iih", 0, 0, 1)  # binary COPY: signature, one field
_COPY_END = struct.pack(">h", -1)
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


_ERRORS = ErrorMap("postgresql", [Row(psycopg.Error)])


class _Pieces:
    """A large frame read by ranged reads into one buffer, each piece only while it is at `gen`.

    A piece that comes back missing or short means the frame was re-saved or deleted
    meanwhile (a generation is never reused): `whole` is then False and the get reads again.
    """

    __slots__ = ("at", "data", "gen", "name", "view", "whole")

    def __init__(self, name: str, gen: int, size: int):
        self.name, self.gen, self.at = name, gen, 0
        self.data = bytearray(size)
        self.view = memoryview(self.data)
        self.whole = True

    def next(self) -> tuple[int, int, str, int] | None:
        """The parameters of the next `get_piece`, or None when every piece is in (or one was not)."""
        if not self.whole or self.at >= len(self.data):
            return None
        return self.at + 1, min(_PIECE, len(self.data) - self.at), self.name, self.gen

    def feed(self, row: tuple[Any, ...] | None) -> None:
        want = min(_PIECE, len(self.data) - self.at)
        if row is None or row[0] is None or len(row[0]) != want:
            self.whole = False
            return
        self.view[self.at : self.at + want] = row[0]
        self.at += want


def _head(row: tuple[Any, ...]) -> Head:
    name, head, gen, full = row
    return name, head, Token(int(gen)), int(full)


def _got_many(names: Sequence[str], rows: list[tuple[Any, ...]]) -> list[tuple[bytes, Token] | None]:
    found = {name: (data, Token(int(gen))) for name, data, gen in rows}
    return [found.get(name) for name in names]


class _Pager:
    """The keyset pages of one listing: `next()` gives the next (statement, parameters), `feed` its rows.

    `limit` rows newest-first (`reverse`) are one bounded index scan of the primary key.
    """

    def __init__(
        self,
        statements: dict[str, bytes],
        kind: str,
        prefix: str,
        size: int,
        limit: int | None,
        reverse: bool,
        before: str | None = None,
    ):
        below = bound(prefix, before)
        self._page = FRAME_BATCH if kind == "frames" else _PAGE
        self._statements = statements
        self._key = f"{kind}:{{}}:{below is not None}:{reverse}"
        self._params: dict[str, Any] = {"after": prefix, "prefix": prefix, "below": below, "size": size}
        self._first = True
        self._remaining = limit
        self._done = False

    def next(self) -> tuple[bytes, dict[str, Any]] | None:
        if self._done or (self._remaining is not None and self._remaining <= 0):
            return None
        self._params["n"] = self._page if self._remaining is None else min(self._page, self._remaining)
        return self._statements[self._key.format(self._first)], self._params

    def feed(self, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) < self._params["n"]:
            self._done = True
            return
        if self._remaining is not None:
            self._remaining -= len(rows)
        self._params["after"] = rows[-1][0]
        self._first = False


class PostgresBackend(Backend):
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
        with _ERRORS.mapped("parse the connection string for", f"{schema}.{table}"):
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
        if "application_name" not in params:
            kwargs["application_name"] = application_name
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = connect_timeout
        self._q = self._statements()
        self._ready = False
        self._upload = True  # large puts by COPY (False once the role turns out to lack TEMP)
        self._ready_lock = threading.Lock()
        self._pool_args = (conninfo, kwargs, pool_max_size, pool_timeout, pool_max_idle)
        self._pool = Pool(*self._pool_args)

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
            # a frame past _WHOLE comes as NULL and is read by `get`, in pieces, as a get reads it
            "frames": f"name, CASE WHEN octet_length(data) <= {_WHOLE} THEN data END, gen",
        }
        out = {
            "version": q(
                "SELECT current_setting('server_encoding'), "
                "(SELECT version FROM {schema}.berth_schema_version WHERE table_name = %s)"
            ),
            "put": q(
                "INSERT INTO {schema}.{table} AS t (name, gen, data) VALUES (%s, nextval('{schema}.{seq}'), %b) "
                "ON CONFLICT (name) DO UPDATE SET gen = EXCLUDED.gen, data = EXCLUDED.data RETURNING t.gen"
            ),
            "put_absent": q(
                "INSERT INTO {schema}.{table} (name, gen, data) VALUES (%s, nextval('{schema}.{seq}'), %b) "
                "ON CONFLICT (name) DO NOTHING RETURNING gen"
            ),
            "put_match": q(
                "UPDATE {schema}.{table} SET gen = nextval('{schema}.{seq}'), data = %b "
                "WHERE name = %s AND gen = %s RETURNING gen"
            ),
            # A large frame is not sent whole: libpq's input buffer, its result and psycopg's bytes
            # would each hold it (a 64 MiB load peaked at 3x the state). Its pieces are read by
            # `get_piece` into one buffer instead (`_Pieces`).
            # A large frame is copied into a temporary table (COPY streams it: a parameter made
            # libpq hold it whole, and grow its buffer to twice that) and taken from there.
            # STORAGE EXTERNAL: pglz would try to compress the whole frame (its cleartext header
            # compresses, so it does not give up early) only to find the ciphertext does not.
            "upload_table": q(
                "DO $$ BEGIN IF to_regclass('pg_temp.berth_upload') IS NULL THEN "
                "CREATE TEMP TABLE berth_upload (data bytea NOT NULL) ON COMMIT DELETE ROWS; "
                "ALTER TABLE pg_temp.berth_upload ALTER COLUMN data SET STORAGE EXTERNAL; END IF; END $$"
            ),
            "upload": q("COPY pg_temp.berth_upload (data) FROM STDIN (FORMAT BINARY)"),
            "put:upload": q(
                "INSERT INTO {schema}.{table} AS t (name, gen, data) "
                "SELECT %s, nextval('{schema}.{seq}'), data FROM pg_temp.berth_upload "
                "ON CONFLICT (name) DO UPDATE SET gen = EXCLUDED.gen, data = EXCLUDED.data RETURNING t.gen"
            ),
            "put_absent:upload": q(
                "INSERT INTO {schema}.{table} (name, gen, data) "
                "SELECT %s, nextval('{schema}.{seq}'), data FROM pg_temp.berth_upload "
                "ON CONFLICT (name) DO NOTHING RETURNING gen"
            ),
            "put_match:upload": q(
                "UPDATE {schema}.{table} SET gen = nextval('{schema}.{seq}'), "
                "data = (SELECT data FROM pg_temp.berth_upload) WHERE name = %s AND gen = %s RETURNING gen"
            ),
            "get": q(
                f"SELECT CASE WHEN octet_length(data) <= {_WHOLE} THEN data END, gen, octet_length(data) "
                "FROM {schema}.{table} WHERE name = %s"
            ),
            "get_piece": q(
                "SELECT substring(data FROM %s::int FOR %s::int) FROM {schema}.{table} WHERE name = %s AND gen = %s"
            ),
            "head": q("SELECT substring(data FROM 1 FOR %s::int), gen FROM {schema}.{table} WHERE name = %s"),
            "delete": q("DELETE FROM {schema}.{table} WHERE name = %s AND gen = %s RETURNING gen"),
        }
        for kind, columns in cols.items():
            for first in (True, False):
                for bounded in (True, False):
                    for reverse in (True, False):
                        if not reverse:
                            where = "name >= %(after)s" if first else "name > %(after)s"
                            if bounded:
                                where += " AND name < %(below)s"
                        else:
                            where = "name >= %(prefix)s"
                            if not first:
                                where += " AND name < %(after)s"
                            elif bounded:
                                where += " AND name < %(below)s"
                        order = "DESC" if reverse else "ASC"
                        out[f"{kind}:{first}:{bounded}:{reverse}"] = q(
                            f"SELECT {columns} FROM {{schema}}.{{table}} WHERE {where} "
                            f"ORDER BY name {order} LIMIT %(n)s"
                        )
        out["get_many"] = q("SELECT name, data, gen FROM {schema}.{table} WHERE name = ANY(%s)")
        out["delete_many"] = q(
            "DELETE FROM {schema}.{table} AS t USING unnest(%s::text[], %s::bigint[]) AS d(name, gen) "
            "WHERE t.name = d.name AND t.gen = d.gen RETURNING t.name, t.gen"
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
        with _ERRORS.mapped("set up", where), self._pool.connection() as conn:
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

        `large`: the parameters hold more than `KEEP_BYTES`, so the cursor is not kept.
        """
        pool = self._pool
        try:
            lease = pool.take()
            try:
                row: tuple[Any, ...] | None = lease.cursor(key, binary).execute(self._q[key], params).fetchone()
                if large or (binary and row is not None and row[0] is not None and len(row[0]) > KEEP_BYTES):
                    lease.release(key)
                return row
            finally:
                pool.give(lease)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, what, name) from exc

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` with a new generation (conditionally if asked)."""
        key, params = self._put_statement(name, data, if_match, if_absent)
        if not self._ready:
            self._ensure_ready()
        if len(data) > _WHOLE and self._upload:
            row = self._put_by_copy(name, key, params)
        else:
            row = self._run("save", name, key, params, large=len(data) > KEEP_BYTES)
        return self._put_token(name, row, if_absent)

    def _put_by_copy(self, name: str, key: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """A large put: the frame streamed by COPY into a temporary table, then the statement takes it from there.

        One transaction; the table empties at its commit. A role without the TEMP privilege
        puts by parameter instead (from then on).
        """
        at = 0 if key == "put_match" else 1  # where _put_statement puts the frame
        data, rest = memoryview(params[at]), params[:at] + params[at + 1 :]
        try:
            with _ERRORS.mapped("save", name), self._pool.connection() as conn, conn.transaction():
                conn.execute(self._q["upload_table"])
                with conn.cursor() as cur:
                    with cur.copy(self._q["upload"]) as copy:
                        copy.write(_COPY_HEAD + struct.pack(">i", len(data)))
                        copy.write(data)
                        copy.write(_COPY_END)
                    row: tuple[Any, ...] | None = cur.execute(self._q[key + ":upload"], rest).fetchone()
                return row
        except BackendError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                raise
        self._upload = False
        return self._run("save", name, key, params, large=True)

    def _put_statement(
        self, name: str, data: bytes, if_match: Token | None, if_absent: bool
    ) -> tuple[str, tuple[Any, ...]]:
        """The statement and parameters of a put (its conditions checked first: no round trip for a bad one).

        The frame goes as a binary parameter (`%b`: no hex text twice its size); a large frame
        sealed into a bytearray goes as a view of it, which psycopg does not copy to bytes.
        """
        if isinstance(data, bytearray):
            data = memoryview(data)
        if if_match is not None:
            if if_absent:
                raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
            if not self._is_gen(if_match):
                raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
            return "put_match", (data, name, if_match.value)
        return ("put_absent" if if_absent else "put"), (name, data)

    @staticmethod
    def _put_token(name: str, row: tuple[Any, ...] | None, if_absent: bool) -> Token:
        if row is None:
            if if_absent:
                raise TokenMismatch(f"{name!r} already exists")
            raise TokenMismatch(f"{name!r} changed since it was read")
        return Token(row[0])

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its generation, or None."""
        if not self._ready:
            self._ensure_ready()
        while True:
            row = self._run("load", name, "get", (name,), binary=True)
            if row is None:
                return None
            if row[0] is not None:
                return row[0], Token(row[1])
            pieces = _Pieces(name, row[1], row[2])
            while (params := pieces.next()) is not None:
                pieces.feed(self._run("load", name, "get_piece", params, binary=True, large=True))
            if pieces.whole:
                return pieces.data, Token(row[1])  # type: ignore[return-value]  # a bytearray: no copy to bytes

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        self._check_gen(name, token)
        if not self._ready:
            self._ensure_ready()
        self._deleted(name, token, self._run("delete", name, "delete", (name, token.value)))

    def _check_gen(self, name: str, token: Token) -> None:
        if not self._is_gen(token):
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    @staticmethod
    def _deleted(name: str, token: Token, row: tuple[Any, ...] | None) -> None:
        if row is None:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    @staticmethod
    def _is_gen(token: Token) -> bool:
        value = token.value
        return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= _INT64_MAX

    def _pages(
        self,
        kind: str,
        prefix: str,
        size: int = 0,
        *,
        limit: int | None = None,
        reverse: bool = False,
        before: str | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        # One short statement per page, each on whatever pooled connection is
        # free: nothing stays open between pages, so a slow consumer holds no
        # snapshot, lock or connection.
        pager = _Pager(self._q, kind, prefix, size, limit, reverse, before)
        self._ensure_ready()
        while (step := pager.next()) is not None:
            with _ERRORS.mapped("list", prefix), self._pool.connection() as conn:
                rows = conn.execute(*step, binary=True).fetchall()
            pager.feed(rows)
            yield from rows

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix`, in name order, a page at a time."""
        for row in self._pages("names", prefix):
            yield row[0]

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`."""
        return self.sorted_heads(prefix, size, limit=None, reverse=False)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order; `limit=1, reverse=True` is one indexed query."""
        for row in self._pages("heads", prefix, size, limit=limit, reverse=reverse):
            yield _head(row)

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> Iterator[Frame]:
        """Whole frames under `prefix` in name order: `limit` of them (up to 64) is one indexed query."""
        for name, data, gen in self._pages("frames", prefix, limit=limit, reverse=reverse, before=before):
            if data is not None:
                yield name, data, Token(int(gen))
            elif (found := self.get(name)) is not None:  # a large frame, read in pieces
                yield name, found[0], found[1]

    def get_many(self, names: Sequence[str]) -> list[tuple[bytes, Token] | None]:
        """Every name's data and generation (or None), in one statement."""
        if not names:
            return []
        self._ensure_ready()
        with _ERRORS.mapped("load", names[0]), self._pool.connection() as conn:
            rows = conn.execute(self._q["get_many"], (list(names),), binary=True).fetchall()
        return _got_many(names, rows)

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Delete each name still at its token, in one statement; whether each was deleted."""
        params = self._delete_many_params(items)
        if params is None:
            return [False] * len(items)
        self._ensure_ready()
        with _ERRORS.mapped("delete", params[0][0]), self._pool.connection() as conn:
            rows = conn.execute(self._q["delete_many"], params).fetchall()
        return self._deleted_many(items, rows)

    def _delete_many_params(self, items: Sequence[tuple[str, Token]]) -> tuple[list[str], list[int]] | None:
        valid = [(name, int(token.value)) for name, token in items if self._is_gen(token)]
        if not valid:
            return None
        return [n for n, _ in valid], [g for _, g in valid]

    def _deleted_many(self, items: Sequence[tuple[str, Token]], rows: list[tuple[Any, ...]]) -> list[bool]:
        gone = {(name, int(gen)) for name, gen in rows}
        return [self._is_gen(token) and (name, int(token.value)) in gone for name, token in items]

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its token (a listing's long header)."""
        self._ensure_ready()
        row = self._run("list", name, "head", (size, name), binary=True)
        return None if row is None else (bytes(row[0]), Token(int(row[1])))

    def close(self) -> None:
        """Close the idle connections; connections in use close when their call returns."""
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.schema}.{self.table})"


# --- async: psycopg's AsyncConnection, natively --------------------------------------------------


class AsyncPostgresBackend(AsyncBackend):
    """`PostgresBackend` awaited, on psycopg's AsyncConnection: the same table, statements and semantics.

    Holds a `PostgresBackend` (`sync`) for the statements and the schema: `setup`
    and the lazy first-use migration run in a worker thread, once.
    """

    sync: PostgresBackend

    def __init__(self, sync: PostgresBackend):
        self.sync = sync
        self._q = sync._q
        self._pool = AsyncPool(*sync._pool_args)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncPostgresBackend:
        return cls(PostgresBackend.from_url(url, **options))

    def __repr__(self) -> str:
        return f"AsyncPostgresBackend({self.sync.schema}.{self.sync.table})"

    async def setup(self) -> None:
        await asyncio.to_thread(self.sync.setup)

    async def _ready(self) -> None:
        if not self.sync._ready:
            await asyncio.to_thread(self.sync._ensure_ready)

    async def _run(
        self, what: str, name: str, key: str, params: Any, *, binary: bool = False, large: bool = False
    ) -> tuple[Any, ...] | None:
        pool = self._pool
        try:
            lease = await pool.take()
            try:
                cur = lease.cursor(key, binary)
                await cur.execute(self._q[key], params)
                row: tuple[Any, ...] | None = await cur.fetchone()
                if large or (binary and row is not None and row[0] is not None and len(row[0]) > KEEP_BYTES):
                    cur = lease.cursors.pop(key)
                    await cur.close()
                return row
            finally:
                await pool.give(lease)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, what, name) from exc

    async def _fetchall(self, what: str, name: str, query: bytes, params: Any, binary: bool) -> list[Any]:
        pool = self._pool
        try:
            lease = await pool.take()
            try:
                cur = lease.conn.cursor(binary=binary)
                try:
                    await cur.execute(query, params)
                    rows: list[Any] = await cur.fetchall()
                    return rows
                finally:
                    await cur.close()
            finally:
                await pool.give(lease)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, what, name) from exc

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        key, params = self.sync._put_statement(name, data, if_match, if_absent)
        await self._ready()
        if len(data) > _WHOLE and self.sync._upload:  # COPY on the sync pool, in a worker thread
            row = await asyncio.to_thread(self.sync._put_by_copy, name, key, params)
        else:
            row = await self._run("save", name, key, params, large=len(data) > KEEP_BYTES)
        return self.sync._put_token(name, row, if_absent)

    async def get(self, name: str) -> tuple[bytes, Token] | None:
        await self._ready()
        while True:
            row = await self._run("load", name, "get", (name,), binary=True)
            if row is None:
                return None
            if row[0] is not None:
                return row[0], Token(row[1])
            pieces = _Pieces(name, row[1], row[2])
            while (params := pieces.next()) is not None:
                pieces.feed(await self._run("load", name, "get_piece", params, binary=True, large=True))
            if pieces.whole:
                return pieces.data, Token(row[1])  # type: ignore[return-value]  # a bytearray: no copy to bytes

    async def delete(self, name: str, token: Token) -> None:
        self.sync._check_gen(name, token)
        await self._ready()
        self.sync._deleted(name, token, await self._run("delete", name, "delete", (name, token.value)))

    async def _pages(
        self, kind: str, prefix: str, size: int, limit: int | None, reverse: bool, before: str | None = None
    ) -> AsyncIterator[tuple[Any, ...]]:
        pager = _Pager(self._q, kind, prefix, size, limit, reverse, before)
        await self._ready()
        while (step := pager.next()) is not None:
            rows = await self._fetchall("list", prefix, *step, binary=True)
            pager.feed(rows)
            for row in rows:
                yield row

    def heads(self, prefix: str, size: int) -> AsyncIterator[Head]:
        return self.sorted_heads(prefix, size, limit=None, reverse=False)

    async def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> AsyncIterator[Head]:
        async for row in self._pages("heads", prefix, size, limit, reverse):
            yield _head(row)

    async def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> AsyncIterator[Frame]:
        async for name, data, gen in self._pages("frames", prefix, 0, limit, reverse, before):
            if data is not None:
                yield name, data, Token(int(gen))
            elif (found := await self.get(name)) is not None:
                yield name, found[0], found[1]

    async def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        await self._ready()
        row = await self._run("list", name, "head", (size, name), binary=True)
        return None if row is None else (bytes(row[0]), Token(int(row[1])))

    async def get_many(self, names: Sequence[str]) -> list[tuple[bytes, Token] | None]:
        if not names:
            return []
        await self._ready()
        rows = await self._fetchall("load", names[0], self._q["get_many"], (list(names),), True)
        return _got_many(names, rows)

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        params = self.sync._delete_many_params(items)
        if params is None:
            return [False] * len(items)
        await self._ready()
        rows = await self._fetchall("delete", params[0][0], self._q["delete_many"], params, False)
        return self.sync._deleted_many(items, rows)

    async def aclose(self) -> None:
        await self._pool.close()
        await asyncio.to_thread(self.sync.close)
