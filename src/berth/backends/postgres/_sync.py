"""`PostgresBackend`: frames as rows of one table, on psycopg 3 and berth's own pool; its setup and migrations."""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg import sql

from berth._errors import BackendError, BerthError, StoreMissing, TokenMismatch
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Frame, Head, Put
from berth.backends.postgres._pool import KEEP_BYTES, Pool
from berth.backends.postgres._sql import (
    COPY_END,
    COPY_HEAD,
    ERRORS,
    IDENT,
    MIGRATIONS,
    SCHEMA_VERSION,
    WHOLE,
    Pager,
    Pieces,
    PutMany,
    check_gen,
    conninfo_of,
    delete_many_params,
    deleted,
    deleted_many,
    got_many,
    head_row,
    put_statement,
    put_token,
    statements,
)

__all__ = ["PostgresBackend"]


class PostgresBackend(Backend):
    """Frames as rows of one PostgreSQL table; safe across threads (a pool), processes and hosts.

    The table is created by `setup()`, which is idempotent and versioned, and
    which runs by itself on first use when the table is missing -- unless opened
    with `create=False`: the first use then only checks that the table is there
    (`StoreMissing` if not), creating nothing. A role without DDL rights works
    once `setup()` has run as one that has them.
    """

    creates = True

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
        create: bool = True,
    ):
        for label, ident in (("schema", schema), ("table", table)):
            if not isinstance(ident, str) or not IDENT.fullmatch(ident):
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
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "parse the connection string for", f"{schema}.{table}") from exc
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
        if "application_name" not in params:
            kwargs["application_name"] = application_name
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = connect_timeout
        self._q = statements(schema, table)
        self.ready = False
        self._create = create
        self._database = f"{params.get('dbname') or params.get('user') or '?'!r} on {params.get('host') or 'localhost'}"
        self._upload = True  # large puts by COPY (False once the role turns out to lack TEMP)
        self._ready_lock = threading.Lock()
        self.pool_args = (conninfo, kwargs, pool_max_size, pool_timeout, pool_max_idle)
        self._pool = Pool(*self.pool_args)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresBackend:
        """Open `postgresql://user:pw@host:port/db?schema=...&table=...` (libpq parameters pass through)."""
        conninfo = conninfo_of(url, options)
        return cls(conninfo, **options)

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
        try:
            with self._pool.connection() as conn:
                if self._installed_version(conn) == SCHEMA_VERSION:
                    self.ready = True
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
                        for statement in MIGRATIONS[step]:
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
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "set up", where) from exc
        self.ready = True
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

    def ensure_ready(self) -> None:
        """Run `setup` once, on first use, unless it has run (the async backend calls it in a thread).

        Opened with `create=False`: only check that the table is there, at this berth's schema
        version, creating nothing.

        Raises:
            StoreMissing: opened with `create=False`, and the table (or its schema) does not exist.
            BackendError: the database failed or refused, or holds another schema version.
        """
        if self.ready:
            return
        with self._ready_lock:
            if self.ready:
                return
            if self._create:
                self.setup()
            else:
                self._check_present()

    def _check_present(self) -> None:
        where = f"{self.schema}.{self.table}"
        try:
            with self._pool.connection() as conn:
                version = self._installed_version(conn)
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "open", where) from exc
        if version == 0:
            raise StoreMissing(
                f"postgresql database {self._database} has no berth table {where} (`berth setup` creates it)"
            )
        if version < SCHEMA_VERSION:
            raise BackendError(
                f"postgresql table {where} is at schema version {version}, older than this berth's "
                f"{SCHEMA_VERSION}: `berth setup` migrates it"
            )
        self.ready = True

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
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, what, name) from exc

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` with a new generation (conditionally if asked)."""
        key, params = put_statement(name, data, if_match, if_absent)
        if not self.ready:
            self.ensure_ready()
        if len(data) > WHOLE:
            row = self.put_large(name, key, params)
        else:
            row = self._run("save", name, key, params, large=len(data) > KEEP_BYTES)
        return put_token(name, row, if_absent)

    def put_large(self, name: str, key: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """A put of a frame over `WHOLE` (statement `key`, `params`): by COPY (`_put_by_copy`), or by
        parameter once the role turned out to lack TEMP. Its row. The async backend runs it in a thread."""
        if self._upload:
            return self._put_by_copy(name, key, params)
        return self._run("save", name, key, params, large=True)

    def _put_by_copy(self, name: str, key: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """A large put: the frame streamed by COPY into a temporary table, then the statement takes it from there.

        One transaction; the table empties at its commit. A role without the TEMP privilege
        puts by parameter instead (from then on).
        """
        at = 0 if key == "put_match" else 1  # where _put_statement puts the frame
        data, rest = memoryview(params[at]), params[:at] + params[at + 1 :]
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute(self._q["upload_table"])
                with conn.cursor() as cur:
                    with cur.copy(self._q["upload"]) as copy:
                        copy.write(COPY_HEAD + struct.pack(">i", len(data)))
                        copy.write(data)
                        copy.write(COPY_END)
                    row: tuple[Any, ...] | None = cur.execute(self._q[key + ":upload"], rest).fetchone()
                return row
        except ERRORS.catches as exc:
            if not isinstance(exc, psycopg.errors.InsufficientPrivilege):
                raise ERRORS.error(exc, "save", name) from exc
        self._upload = False
        return self._run("save", name, key, params, large=True)

    def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        """Every item in one statement (one round trip, one transaction); a frame over `WHOLE` alone, after them."""
        batch = PutMany(items)
        if not self.ready:
            self.ensure_ready()
        rows: list[tuple[Any, ...]] = []
        if batch.params is not None:
            try:
                with self._pool.connection() as conn:
                    rows = conn.execute(self._q["put_many"], batch.params).fetchall()
            except ERRORS.catches as exc:
                raise ERRORS.error(exc, "save", batch.first()) from exc
        return batch.outcomes(rows, super().put_many([items[at] for at in batch.large]))

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its generation, or None."""
        if not self.ready:
            self.ensure_ready()
        while True:
            row = self._run("load", name, "get", (name,), binary=True)
            if row is None:
                return None
            if row[0] is not None:
                return row[0], Token(row[1])
            pieces = Pieces(name, row[1], row[2])
            while (params := pieces.next()) is not None:
                pieces.feed(self._run("load", name, "get_piece", params, binary=True, large=True))
            if pieces.whole:
                return pieces.data, Token(row[1])  # type: ignore[return-value]  # a bytearray: no copy to bytes

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        check_gen(name, token)
        if not self.ready:
            self.ensure_ready()
        deleted(name, token, self._run("delete", name, "delete", (name, token.value)))

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
        pager = Pager(self._q, kind, prefix, size, limit, reverse, before)
        self.ensure_ready()
        while (step := pager.next()) is not None:
            try:
                with self._pool.connection() as conn:
                    rows = conn.execute(*step, binary=True).fetchall()
            except ERRORS.catches as exc:
                raise ERRORS.error(exc, "list", prefix) from exc
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
            yield head_row(row)

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
        self.ensure_ready()
        try:
            with self._pool.connection() as conn:
                rows = conn.execute(self._q["get_many"], (list(names),), binary=True).fetchall()
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "load", names[0]) from exc
        return got_many(names, rows)

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Delete each name still at its token, in one statement; whether each was deleted."""
        params = delete_many_params(items)
        if params is None:
            return [False] * len(items)
        self.ensure_ready()
        try:
            with self._pool.connection() as conn:
                rows = conn.execute(self._q["delete_many"], params).fetchall()
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "delete", params[0][0]) from exc
        return deleted_many(items, rows)

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its token (a listing's long header)."""
        self.ensure_ready()
        row = self._run("list", name, "head", (size, name), binary=True)
        return None if row is None else (bytes(row[0]), Token(int(row[1])))

    def close(self) -> None:
        """Close the idle connections; connections in use close when their call returns."""
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.schema}.{self.table})"
