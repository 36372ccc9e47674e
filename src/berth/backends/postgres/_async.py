"""`AsyncPostgresBackend`: `PostgresBackend` awaited, on psycopg's AsyncConnection and the async pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from berth._errors import TokenMismatch
from berth._token import Token
from berth.backends._aio import AsyncBackend
from berth.backends._bulk import Frame, Head, Put
from berth.backends.postgres._aio_pool import KEEP_BYTES, AsyncPool
from berth.backends.postgres._sql import (
    ERRORS,
    WHOLE,
    Pager,
    Pieces,
    PutMany,
    check_gen,
    delete_many_params,
    deleted,
    deleted_many,
    got_many,
    head_row,
    put_statement,
    put_token,
    statements,
)
from berth.backends.postgres._sync import PostgresBackend

__all__ = ["AsyncPostgresBackend"]


class AsyncPostgresBackend(AsyncBackend):
    """`PostgresBackend` awaited, on psycopg's AsyncConnection: the same table, statements and semantics.

    Holds a `PostgresBackend` (`sync`) for the statements and the schema: `setup`
    and the lazy first-use migration run in a worker thread, once.
    """

    sync: PostgresBackend

    def __init__(self, sync: PostgresBackend):
        self.sync = sync
        self._q = statements(sync.schema, sync.table)
        self._pool = AsyncPool(*sync.pool_args)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncPostgresBackend:
        return cls(PostgresBackend.from_url(url, **options))

    def __repr__(self) -> str:
        return f"AsyncPostgresBackend({self.sync.schema}.{self.sync.table})"

    async def setup(self) -> None:
        await asyncio.to_thread(self.sync.setup)

    async def _ready(self) -> None:
        if not self.sync.ready:
            await asyncio.to_thread(self.sync.ensure_ready)

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
                    await lease.release(key)
                return row
            finally:
                await pool.give(lease)
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, what, name) from exc

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
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, what, name) from exc

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        key, params = put_statement(name, data, if_match, if_absent)
        await self._ready()
        if len(data) > WHOLE:  # COPY on the sync pool, in a worker thread
            row = await asyncio.to_thread(self.sync.put_large, name, key, params)
        else:
            row = await self._run("save", name, key, params, large=len(data) > KEEP_BYTES)
        return put_token(name, row, if_absent)

    async def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        batch = PutMany(items)
        await self._ready()
        rows = (
            []
            if batch.params is None
            else await self._fetchall("save", batch.first(), self._q["put_many"], batch.params, False)
        )
        return batch.outcomes(rows, await super().put_many([items[at] for at in batch.large]))

    async def get(self, name: str) -> tuple[bytes, Token] | None:
        await self._ready()
        while True:
            row = await self._run("load", name, "get", (name,), binary=True)
            if row is None:
                return None
            if row[0] is not None:
                return row[0], Token(row[1])
            pieces = Pieces(name, row[1], row[2])
            while (params := pieces.next()) is not None:
                pieces.feed(await self._run("load", name, "get_piece", params, binary=True, large=True))
            if pieces.whole:
                return pieces.data, Token(row[1])  # type: ignore[return-value]  # a bytearray: no copy to bytes

    async def delete(self, name: str, token: Token) -> None:
        check_gen(name, token)
        await self._ready()
        deleted(name, token, await self._run("delete", name, "delete", (name, token.value)))

    async def _pages(
        self, kind: str, prefix: str, size: int, limit: int | None, reverse: bool, before: str | None = None
    ) -> AsyncIterator[tuple[Any, ...]]:
        pager = Pager(self._q, kind, prefix, size, limit, reverse, before)
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
            yield head_row(row)

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
        return got_many(names, rows)

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        params = delete_many_params(items)
        if params is None:
            return [False] * len(items)
        await self._ready()
        rows = await self._fetchall("delete", params[0][0], self._q["delete_many"], params, False)
        return deleted_many(items, rows)

    async def aclose(self) -> None:
        await self._pool.close()
        await asyncio.to_thread(self.sync.close)
