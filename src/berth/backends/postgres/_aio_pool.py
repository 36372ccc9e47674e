"""The PostgreSQL backend's connection pool, berth's own and small, on psycopg's AsyncConnection.

`_aio_pool.py` (async) is the source; `_pool.py` (sync) is generated from it by scripts/twin.py
(never edit that one: change the source and run the script).

Why not psycopg_pool: berth's first PostgreSQL backend used it, and the fault trials
(a server restarted, connections killed with `pg_terminate_backend`) found that after an
outage its connections come back on the pool's background reconnect schedule, so the first
calls after the server is back wait or fail (`PoolTimeout`) instead of working at once. A
parked run must be claimable the moment the database answers again. This pool connects on
demand, in the caller (thread or task), and notices an idle connection the server closed before handing
it out (its socket is readable), at no extra round trip while it is healthy; a forked child
starts with an empty pool. See docs/backends/postgresql.md. (Kept for issue 33: it is what
makes the first call after an outage work, not a micro-optimisation; the kept cursors of
`AsyncLease` save ~30 us of client CPU a statement, see its docstring.)
"""

from __future__ import annotations

import asyncio
import os
import select
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from berth._sealer import LARGE_FRAME

# twin: sync import threading

__all__ = ["KEEP_BYTES", "AsyncLease", "AsyncPool"]

KEEP_BYTES = LARGE_FRAME  # a pooled cursor that moved a frame larger than this is not kept (see AsyncLease)

_IDLE_TX = psycopg.pq.TransactionStatus.IDLE


class AsyncLease:
    """One pooled connection and the cursors it keeps, one per statement, reused call after call.

    A cursor that runs the same statement object again keeps its adapters and
    parsed query (psycopg's cache), which a cursor made per call rebuilds: about
    30 µs of client CPU a statement. A kept cursor also keeps its last result and
    parameters until its next use, so one that moved more than `KEEP_BYTES` is
    closed at once instead (`release`).
    """

    __slots__ = ("conn", "cursors", "since")

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self.conn = conn
        self.cursors: dict[str, psycopg.AsyncCursor[Any]] = {}
        self.since = 0.0

    def cursor(self, key: str, binary: bool) -> psycopg.AsyncCursor[Any]:
        """The kept cursor of statement `key` (made on first use)."""
        cur = self.cursors.get(key)
        if cur is None:
            cur = self.cursors[key] = self.conn.cursor(binary=binary)
        return cur

    async def release(self, key: str) -> None:
        """Close the kept cursor of statement `key`, if any (it moved a large frame)."""
        cur = self.cursors.pop(key, None)
        if cur is not None:
            await cur.close()


_POOLS: weakref.WeakSet[AsyncPool] = weakref.WeakSet()  # each starts empty in a forked child


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class AsyncPool:
    """Connections for one backend: at most `max_size` open at once, idle ones reused newest first.

    A connection is made by the caller that needs one when no idle one is alive, so
    the first call after the server comes back connects at once (no background
    reconnect schedule to wait out). An idle connection the server has closed
    (restart, `pg_terminate_backend`) is noticed without a round trip -- its socket
    is readable -- and dropped before use.

    Taking and giving back an idle connection is a `deque` pop and append (atomic, no
    lock); the condition is only taken to open, drop or wait for a connection, each
    wait bounded by `timeout` (`pool_timeout`). A forked child starts with an empty
    pool (`os.register_at_fork`): the parent's connections are not the child's to use
    or close.
    """

    def __init__(self, conninfo: str, kwargs: dict[str, Any], max_size: int, timeout: float, max_idle: float):
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._max_size = max_size
        self._timeout = timeout
        self._max_idle = max_idle
        self._closed = False
        self._forked()
        _POOLS.add(self)

    def _forked(self) -> None:
        # Also the whole of a forked child's pool: the parent's connections are dropped unclosed
        # (psycopg never closes them in a child), never used or closed here.
        self._idle: deque[AsyncLease] = deque()
        self._cond = asyncio.Condition()  # twin: sync self._cond = threading.Condition(threading.Lock())
        self._size = 0  # connections open or being opened, idle or in use
        self._waiting = 0

    def _reusable(self, lease: AsyncLease) -> bool:
        conn = lease.conn
        return (
            time.monotonic() - lease.since < self._max_idle
            and conn.pgconn.transaction_status == _IDLE_TX
            # an idle connection has nothing to read unless the server ended it
            and not select.select([conn.pgconn.socket], [], [], 0)[0]
        )

    async def take(self) -> AsyncLease:
        """A connection: an idle one that is alive, else a new one (up to `max_size`), else the
        first one given back within `timeout` (`OperationalError` after it)."""
        deadline = 0.0
        while True:
            if self._closed:
                raise psycopg.OperationalError("the backend is closed")
            try:
                lease = self._idle.pop()
            except IndexError:
                pass
            else:
                if self._reusable(lease):
                    return lease
                await self._drop(lease)
                continue
            async with self._cond:
                if self._size < self._max_size:
                    self._size += 1
                    break
                self._waiting += 1  # before looking at _idle: give() appends, then reads _waiting
                try:
                    if not self._idle:
                        if not deadline:
                            deadline = time.monotonic() + self._timeout
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or (not await self._wait(remaining) and not self._idle):
                            raise psycopg.OperationalError(
                                f"no free connection within {self._timeout:g} s (pool_timeout)"
                            )
                finally:
                    self._waiting -= 1
        try:
            return AsyncLease(await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs))
        except BaseException:
            await self._forget()
            raise

    async def _wait(self, timeout: float) -> bool:
        """Wait on the condition (held) for a notification, at most `timeout` s; whether one came."""
        # twin: sync return self._cond.wait(timeout)
        # twin: async-only
        try:
            async with asyncio.timeout(timeout):
                await self._cond.wait()
        except TimeoutError:
            return False
        return True
        # twin: end

    async def give(self, lease: AsyncLease) -> None:
        """Give back a connection `take` gave: kept idle if it is reusable, else closed."""
        if not self._closed and lease.conn.pgconn.transaction_status == _IDLE_TX:
            lease.since = time.monotonic()
            self._idle.append(lease)
            if self._waiting:
                async with self._cond:
                    self._cond.notify()
            if self._closed:  # close() ran meanwhile and may have drained before the append
                await self.close()
        else:
            await self._drop(lease)

    async def _drop(self, lease: AsyncLease) -> None:
        try:
            await lease.conn.close()
        finally:
            await self._forget()

    async def _forget(self) -> None:
        async with self._cond:
            self._size -= 1
            self._cond.notify()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """`with`: a pooled connection, given back at the end of the block."""
        lease = await self.take()
        try:
            yield lease.conn
        finally:
            await self.give(lease)

    async def close(self) -> None:
        """Close the idle connections; connections in use close when given back."""
        self._closed = True
        while True:
            try:
                lease = self._idle.pop()
            except IndexError:
                break
            await self._drop(lease)
        async with self._cond:
            self._cond.notify_all()
