"""`LeanPool`: the async Redis backend's connection pool, redis.asyncio's own made lean; `CallGate`: the
async cluster client's bound on calls at once (its nodes refuse, never wait, past `max_connections`).

Why berth's own (kept, measured for issue 33, redis-py 8.1, CPU time, 5 interleaved runs each):
taking and giving back a connection costs ~1.1 us here against ~29.5 us for redis-py's
`BlockingConnectionPool` (`get_connection` + `release`: a lock, a condition, a health read,
metrics), and a save and a claim take three: ~85 us of a ~610 us async cycle (64 KiB, AES-GCM),
~14 %; a whole-cycle run with each pool measured 486 against 613 us (21 %). Over the 5 % a
micro-optimisation must earn, so it stays.

It subclasses `redis.asyncio.ConnectionPool` and writes two of its private fields
(`_available_connections`, `_in_use_connections`; `PRIVATE_FIELDS`): redis is
capped below its next major in pyproject.toml, and tests/backends/test_redis_pool.py fails
loudly, naming the field, when an installed redis-py no longer has them as this pool uses them.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections import deque
from typing import Any

import redis.asyncio
import redis.exceptions

from berth.backends._aio import expire

__all__ = ["PRIVATE_FIELDS", "CallGate", "LeanPool"]

PRIVATE_FIELDS: dict[str, tuple[type, ...]] = {
    "_available_connections": (list,),
    "_in_use_connections": (set, weakref.WeakSet),
}
"""redis-py's private fields of `redis.asyncio.ConnectionPool` this pool writes, and their types."""

_POOLS: weakref.WeakSet[Any] = weakref.WeakSet()  # every LeanPool and CallGate: each starts empty in a forked child


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class LeanPool(redis.asyncio.ConnectionPool):
    """redis.asyncio's pool, lean: at most `max_connections`, waiters in order for `wait_timeout` s.

    Overrides `get_connection` and `release` (what the client and its pipelines call)
    and adds `take`/`give`, the same without the client. No lock: the pool belongs to
    one event loop, whose steps do not interleave.
    """

    wait_timeout: float = 10.0

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._waiters: deque[asyncio.Future[None]] = deque()
        _POOLS.add(self)

    def _forked(self) -> None:
        # The parent's connections are dropped unclosed: their sockets are the parent's.
        self._available_connections = []
        self._in_use_connections = set()
        self._waiters = deque()

    async def get_connection(self, *_args: Any, **_options: Any) -> Any:
        return await self.take()

    async def release(self, connection: Any) -> None:
        self.give(connection)

    async def take(self) -> Any:
        conn: Any = None
        deadline = 0.0
        while conn is None:
            if self._available_connections:
                conn = self._available_connections.pop()
            elif len(self._in_use_connections) < self.max_connections:
                conn = self.make_connection()  # type: ignore[no-untyped-call]
            else:
                loop = asyncio.get_running_loop()
                if not deadline:
                    deadline = loop.time() + self.wait_timeout
                waiter = loop.create_future()
                self._waiters.append(waiter)
                timer = loop.call_at(deadline, expire, waiter)
                try:
                    conn = await waiter  # handed over by give(), still counted in use
                except TimeoutError:
                    raise redis.exceptions.ConnectionError(
                        f"no free connection within {self.wait_timeout:g} s (pool_timeout)"
                    ) from None
                except BaseException:  # cancelled: a connection handed over meanwhile goes on
                    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                        self.give(waiter.result())
                    raise
                finally:
                    timer.cancel()
                break
            self._in_use_connections.add(conn)
        try:
            if not conn.is_connected:
                await conn.connect()
            elif await _stale(conn):  # closed by the server (EOF seen) or left dirty: a fresh one
                await conn.disconnect()
                await conn.connect()
        except BaseException:
            self.give(conn)
            raise
        return conn

    def give(self, conn: Any) -> None:
        # Straight to the first waiter (timed-out or cancelled ones are done: skipped), else idle.
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._in_use_connections.discard(conn)
        self._available_connections.append(conn)


class CallGate:
    """At most `limit` calls at once on one event loop; the others wait in turn for `wait_timeout` s.

    For redis-py's async cluster client, whose nodes raise `MaxConnectionsError` at once when
    their `max_connections` are in use (`ClusterNode.acquire_connection`: no waiting): a berth
    call holds at most one connection per node at a time, so `max_connections` calls at once
    never meet it, and the next waits as on one server's pool. Starts empty in a forked child.
    """

    def __init__(self, limit: int, wait_timeout: float):
        self.limit = limit
        self.wait_timeout = wait_timeout
        self._forked()
        _POOLS.add(self)

    def _forked(self) -> None:
        self._free = asyncio.Semaphore(self.limit)

    async def enter(self) -> None:
        if not self._free.locked():
            await self._free.acquire()  # a free place: taken without a suspension
            return
        try:
            async with asyncio.timeout(self.wait_timeout):
                await self._free.acquire()
        except TimeoutError:
            raise redis.exceptions.ConnectionError(
                f"no free connection within {self.wait_timeout:g} s (pool_timeout)"
            ) from None

    def leave(self) -> None:
        self._free.release()


async def _stale(conn: Any) -> bool:
    """Whether an idle connection must be made anew: data left on it, or closed by the server.

    Before redis-py 8.2 a closed one reads as data waiting (True); from 8.2 the parser raises
    `ConnectionError("Connection closed by server.")` instead, which the connection does not catch
    (it disconnects only on `OSError`): taken as data waiting, never passed on, or the pool would
    hand the same dead connection out again on every call, for good.
    """
    can_read = getattr(conn, "can_read", None) or conn.can_read_destructive  # redis >= 8 / older
    try:
        return bool(await can_read())
    except (redis.exceptions.ConnectionError, OSError):
        return True
