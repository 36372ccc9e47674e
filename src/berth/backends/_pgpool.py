"""The PostgreSQL backend's connection pools: berth's own, small, sync and async.

Why not psycopg_pool: berth's first PostgreSQL backend used it, and the fault trials
(a server restarted, connections killed with `pg_terminate_backend`) found that after an
outage its connections come back on the pool's background reconnect schedule, so the first
calls after the server is back wait or fail (`PoolTimeout`) instead of working at once. A
parked run must be claimable the moment the database answers again. These pools connect on
demand, in the calling thread (or task), and notice an idle connection the server closed
before handing it out (its socket is readable), at no extra round trip while it is healthy;
a forked child starts with empty pools. See docs/backends/postgresql.md.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from berth._sealer import LARGE_FRAME
from berth.backends._aio import expire

__all__ = ["KEEP_BYTES", "AsyncPool", "Lease", "Pool"]

KEEP_BYTES = LARGE_FRAME  # a pooled cursor that moved a frame larger than this is not kept (see Lease)

_IDLE_TX = psycopg.pq.TransactionStatus.IDLE


class Lease:
    """One pooled connection and the cursors it keeps, one per statement, reused call after call.

    A cursor that runs the same statement object again keeps its adapters and
    parsed query (psycopg's cache), which a cursor made per call rebuilds: about
    30 µs of client CPU a statement. A kept cursor also keeps its last result and
    parameters until its next use, so one that moved more than `KEEP_BYTES` is
    closed at once instead (`release`).
    """

    __slots__ = ("conn", "cursors", "since")

    def __init__(self, conn: Any):  # a psycopg Connection, or an AsyncConnection in _AsyncPool
        self.conn = conn
        self.cursors: dict[str, Any] = {}
        self.since = 0.0

    def cursor(self, key: str, binary: bool) -> Any:
        cur = self.cursors.get(key)
        if cur is None:
            cur = self.cursors[key] = self.conn.cursor(binary=binary)
        return cur

    def release(self, key: str) -> None:
        cur = self.cursors.pop(key, None)
        if cur is not None:
            cur.close()


class _Settings:
    """What both pools are opened with; each starts empty and is emptied again in a forked child."""

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
        raise NotImplementedError


class Pool(_Settings):
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

    def _reset(self) -> None:
        self._idle: deque[Lease] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._size = 0  # connections open or being opened, idle or in use
        self._waiting = 0

    def take(self) -> Lease:
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
            return Lease(psycopg.connect(self._conninfo, **self._kwargs))
        except BaseException:
            self._forget()
            raise

    def give(self, lease: Lease) -> None:
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

    def _drop(self, lease: Lease) -> None:
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


_POOLS: weakref.WeakSet[_Settings] = weakref.WeakSet()  # each starts empty in a forked child


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class AsyncPool(_Settings):
    """`_Pool`'s async twin for one event loop: the same rules, awaited.

    At most `max_size` connections; idle ones reused newest first; a connection
    the server closed (restart, `pg_terminate_backend`) is noticed without a
    round trip -- its socket is readable while idle -- and dropped before use; a
    connection is made by the task that needs one, so the first call after the
    server comes back connects at once; a forked child starts with an empty pool.
    Waiters queue in order, each with `pool_timeout`, and a connection given back
    goes straight to the first of them (no task can take it in between). Not
    psycopg_pool's AsyncConnectionPool, for the reason the sync pool is not its
    ConnectionPool: a background reconnect schedule to wait out after a restart
    (see the fault trials in docs/reliability.md).
    """

    def _forked(self) -> None:
        # Also the whole of a forked child's pool: the parent's connections (and the futures of
        # its loop's waiters) are dropped unclosed, as `_Pool`'s are -- never used or closed here.
        self._idle: deque[Lease] = deque()
        self._waiters: deque[asyncio.Future[Lease | None]] = deque()
        self._size = 0

    def _reusable(self, lease: Lease) -> bool:
        conn = lease.conn
        return (
            time.monotonic() - lease.since < self._max_idle
            and conn.pgconn.transaction_status == _IDLE_TX
            and not select.select([conn.pgconn.socket], [], [], 0)[0]
        )

    async def take(self) -> Lease:
        deadline = 0.0
        while True:
            if self._closed:
                raise psycopg.OperationalError("the backend is closed")
            while self._idle:
                lease = self._idle.pop()
                if self._reusable(lease):
                    return lease
                await self._drop(lease)
            if self._size < self._max_size:
                self._size += 1
                try:
                    return Lease(await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs))
                except BaseException:
                    self._forget()
                    raise
            loop = asyncio.get_running_loop()
            if not deadline:
                deadline = loop.time() + self._timeout
            waiter: asyncio.Future[Lease | None] = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_at(deadline, expire, waiter)
            try:
                given = await waiter
            except TimeoutError:
                raise psycopg.OperationalError(
                    f"no free connection within {self._timeout:g} s (pool_timeout)"
                ) from None
            except BaseException:  # cancelled: a lease handed over meanwhile goes to the next waiter
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    handed = waiter.result()
                    if handed is not None:
                        self._hand(handed)
                raise
            finally:
                timer.cancel()
            if given is not None:  # handed over by give(): no other task could take it meanwhile
                if self._reusable(given):
                    return given
                await self._drop(given)
            # else a slot freed (or the pool closed): look again

    def _wake_one(self, lease: Lease | None = None) -> bool:
        # Waiters that timed out or were cancelled are done: skipped (never searched for and removed).
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(lease)
                return True
        return False

    def _hand(self, lease: Lease) -> None:
        """An idle connection goes straight to the first waiter, else to the idle list."""
        lease.since = time.monotonic()
        if not self._wake_one(lease):
            self._idle.append(lease)

    async def give(self, lease: Lease) -> None:
        if not self._closed and lease.conn.pgconn.transaction_status == _IDLE_TX:
            self._hand(lease)
        else:
            await self._drop(lease)

    async def _drop(self, lease: Lease) -> None:
        try:
            await lease.conn.close()
        finally:
            self._forget()

    def _forget(self) -> None:
        self._size -= 1
        self._wake_one()

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            await self._drop(self._idle.pop())
        while self._wake_one():
            pass
