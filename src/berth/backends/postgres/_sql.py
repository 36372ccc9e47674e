"""What the sync and the async PostgreSQL backends share, no I/O: the statements, the layout's
migrations, the error table, the paging of listings and of large frames, and the checks and
readings around each call."""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from berth._errors import TokenMismatch
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends._bulk import FRAME_BATCH, Head, Put, bound
from berth.backends._errmap import ErrorMap, Row
from berth.backends._url import own_options

__all__ = [
    "COPY_END",
    "COPY_HEAD",
    "ERRORS",
    "IDENT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WHOLE",
    "Pager",
    "Pieces",
    "PutMany",
    "check_gen",
    "conninfo_of",
    "deleted",
    "deleted_many",
    "delete_many_params",
    "got_many",
    "head_row",
    "put_statement",
    "put_token",
    "statements",
]

SCHEMA_VERSION = 1
"""The table layout this berth creates and reads; `setup()` migrates older ones up to it."""

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_PAGE = 500
_INT64_MAX = 2**63 - 1
WHOLE = LARGE_FRAME  # a get returns a frame up to this size in its one row; a larger one is read in pieces
_PIECE = 2 << 20  # bytes per ranged read of a large frame (libpq holds about three times this meanwhile)
COPY_HEAD = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">iih", 0, 0, 1)  # binary COPY: signature, one field
COPY_END = struct.pack(">h", -1)
# URL query parameters that are berth's, not libpq's (libpq refuses unknown ones).
_URL_OPTIONS = {
    "schema": str,
    "table": str,
    "pool_max_size": int,
    "pool_timeout": float,
    "pool_max_idle": float,
}

# Each step moves the layout from version i to i + 1; append, never edit.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE SEQUENCE IF NOT EXISTS {schema}.{seq} AS bigint NO CYCLE",
        "CREATE TABLE IF NOT EXISTS {schema}.{table} ("
        ' name text COLLATE "C" PRIMARY KEY, gen bigint NOT NULL, data bytea NOT NULL)',
        "ALTER TABLE {schema}.{table} ALTER COLUMN data SET STORAGE EXTERNAL",
        "ALTER SEQUENCE {schema}.{seq} OWNED BY {schema}.{table}.gen",
    ],
]


ERRORS = ErrorMap("postgresql", [Row(psycopg.Error)])
"""The PostgreSQL backends' one table of client errors (`berth/backends/_errmap.py`)."""


class Pieces:
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


def head_row(row: tuple[Any, ...]) -> Head:
    name, head, gen, full = row
    return name, head, Token(int(gen)), int(full)


def got_many(names: Sequence[str], rows: list[tuple[Any, ...]]) -> list[tuple[bytes, Token] | None]:
    found = {name: (data, Token(int(gen))) for name, data, gen in rows}
    return [found.get(name) for name in names]


class Pager:
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


def statements(schema: str, table: str) -> dict[str, bytes]:
    """Every statement of the backend on `schema`.`table`, by key, as bytes (composed once, at open)."""
    ids = {
        "schema": sql.Identifier(schema),
        "table": sql.Identifier(table),
        "seq": sql.Identifier(table + "_gen"),
    }

    def q(text: str) -> bytes:
        return sql.SQL(text).format(**ids).as_bytes(None)

    cols = {
        "names": "name",
        "heads": "name, substring(data FROM 1 FOR %(size)s), gen, octet_length(data)",
        # a frame past WHOLE comes as NULL and is read by `get`, in pieces, as a get reads it
        "frames": f"name, CASE WHEN octet_length(data) <= {WHOLE} THEN data END, gen",
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
            f"SELECT CASE WHEN octet_length(data) <= {WHOLE} THEN data END, gen, octet_length(data) "
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
                        f"SELECT {columns} FROM {{schema}}.{{table}} WHERE {where} ORDER BY name {order} LIMIT %(n)s"
                    )
    # A batch of puts in one statement (one round trip, one transaction): the three kinds of put
    # as data-modifying CTEs over arrays, each row touched once (a batch's names are distinct).
    rows = "SELECT n, nextval('{schema}.{seq}'), d FROM unnest(%s::text[], %b::bytea[]) AS x(n, d)"
    out["put_many"] = q(
        f"WITH p AS (INSERT INTO {{schema}}.{{table}} AS t (name, gen, data) {rows} "
        "ON CONFLICT (name) DO UPDATE SET gen = EXCLUDED.gen, data = EXCLUDED.data RETURNING t.name, t.gen), "
        f"a AS (INSERT INTO {{schema}}.{{table}} (name, gen, data) {rows} "
        "ON CONFLICT (name) DO NOTHING RETURNING name, gen), "
        "m AS (UPDATE {schema}.{table} AS t SET gen = nextval('{schema}.{seq}'), data = x.d "
        "FROM unnest(%s::text[], %s::bigint[], %b::bytea[]) AS x(n, g, d) WHERE t.name = x.n AND t.gen = x.g "
        "RETURNING t.name, t.gen) "
        "SELECT name, gen FROM p UNION ALL SELECT name, gen FROM a UNION ALL SELECT name, gen FROM m"
    )
    out["get_many"] = q("SELECT name, data, gen FROM {schema}.{table} WHERE name = ANY(%s)")
    out["delete_many"] = q(
        "DELETE FROM {schema}.{table} AS t USING unnest(%s::text[], %s::bigint[]) AS d(name, gen) "
        "WHERE t.name = d.name AND t.gen = d.gen RETURNING t.name, t.gen"
    )
    return out


def conninfo_of(url: str, options: dict[str, Any]) -> str:
    """The libpq connection string of a `postgresql://` URL; berth's own query options go to `options`."""
    return own_options(url, _URL_OPTIONS, options, "postgresql")


def put_statement(name: str, data: bytes, if_match: Token | None, if_absent: bool) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters of a put (its conditions checked first: no round trip for a bad one).

    The frame goes as a binary parameter (`%b`: no hex text twice its size); a large frame
    sealed into a bytearray goes as a view of it, which psycopg does not copy to bytes.
    """
    if isinstance(data, bytearray):
        data = memoryview(data)
    if if_match is not None:
        if if_absent:
            raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
        if not _is_gen(if_match):
            raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
        return "put_match", (data, name, if_match.value)
    return ("put_absent" if if_absent else "put"), (name, data)


def put_token(name: str, row: tuple[Any, ...] | None, if_absent: bool) -> Token:
    """The token of a put from its row (`TokenMismatch`: none, its condition did not hold)."""
    if row is None:
        if if_absent:
            raise TokenMismatch(f"{name!r} already exists")
        raise TokenMismatch(f"{name!r} changed since it was read")
    return Token(row[0])


class PutMany:
    """A `put_many` without I/O: the parameters of its one statement (`params`, None: nothing for it),
    the items too large for it (`large`, put one by one), and each item's outcome from the rows."""

    __slots__ = ("items", "large", "params", "refused")

    def __init__(self, items: Sequence[Put]):
        self.items = items
        self.large: list[int] = []
        self.refused: dict[int, TokenMismatch] = {}  # a condition no row can meet: no round trip
        arrays: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        plain_n, plain_d, absent_n, absent_d, match_n, match_g, match_d = arrays
        for at, (name, data, if_match, if_absent) in enumerate(items):
            if len(data) > WHOLE:
                self.large.append(at)
                continue
            try:
                put_statement(name, data, if_match, if_absent)
            except TokenMismatch as exc:
                self.refused[at] = exc
                continue
            data = data if type(data) is bytes else bytes(data)  # one element type per array
            if if_match is not None:
                match_n.append(name)
                match_g.append(if_match.value)
                match_d.append(data)
            elif if_absent:
                absent_n.append(name)
                absent_d.append(data)
            else:
                plain_n.append(name)
                plain_d.append(data)
        self.params = arrays if any(arrays) else None

    def first(self) -> str:
        """The name an error of the statement names."""
        return self.items[0].name

    def outcomes(
        self, rows: list[tuple[Any, ...]], large: Sequence[Token | TokenMismatch]
    ) -> list[Token | TokenMismatch]:
        """Each item's token or `TokenMismatch`, from the statement's `(name, gen)` rows and the large items' puts."""
        done = {name: Token(int(gen)) for name, gen in rows}
        alone = dict(zip(self.large, large, strict=True))
        out: list[Token | TokenMismatch] = []
        for at, item in enumerate(self.items):
            if at in alone:
                out.append(alone[at])
            elif at in self.refused:
                out.append(self.refused[at])
            elif item.name in done:
                out.append(done[item.name])
            else:
                why = "already exists" if item.if_absent else "changed since it was read"
                out.append(TokenMismatch(f"{item.name!r} {why}"))
        return out


def check_gen(name: str, token: Token) -> None:
    """`TokenMismatch` for a token that cannot be a generation of this backend (before any I/O)."""
    if not _is_gen(token):
        raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")


def deleted(name: str, token: Token, row: tuple[Any, ...] | None) -> None:
    """`TokenMismatch` unless the conditional delete returned a row."""
    if row is None:
        raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")


def _is_gen(token: Token) -> bool:
    value = token.value
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= _INT64_MAX


def delete_many_params(items: Sequence[tuple[str, Token]]) -> tuple[list[str], list[int]] | None:
    """The (names, generations) arrays of a `delete_many` (None: no token of this backend)."""
    valid = [(name, int(token.value)) for name, token in items if _is_gen(token)]
    if not valid:
        return None
    return [n for n, _ in valid], [g for _, g in valid]


def deleted_many(items: Sequence[tuple[str, Token]], rows: list[tuple[Any, ...]]) -> list[bool]:
    """Whether each item was deleted, from the rows `delete_many` returned."""
    gone = {(name, int(gen)) for name, gen in rows}
    return [_is_gen(token) and (name, int(token.value)) in gone for name, token in items]
