"""The async Redis backend's lean pool (berth/backends/redis/_pool.py) against the installed redis-py.

`LeanPool` subclasses `redis.asyncio.ConnectionPool` and writes two of its private fields. These
tests need no server: they fail, naming the field and the version, the day a redis-py release
moves or retypes what the pool relies on (pyproject caps redis below its next major meanwhile).
"""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path
from typing import Any

from tests.conftest import require

require("redis", "Redis")
import redis  # noqa: E402
import redis.asyncio  # noqa: E402

from berth.backends.redis._pool import PRIVATE_FIELDS, CallGate, LeanPool  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHANGED = "redis-py {version} changed {field}; berth's lean pool (berth/backends/redis/_pool.py) needs updating"


class _Conn:
    """A stand-in connection: what the pool and redis-py's own `disconnect` call on one."""

    def __init__(self) -> None:
        self.is_connected = True
        self.closed = 0

    async def can_read_destructive(self) -> bool:
        return False

    can_read = can_read_destructive

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self.closed += 1


def test_redis_py_still_has_the_private_fields_the_lean_pool_writes() -> None:
    stock = redis.asyncio.ConnectionPool()
    for field, types in PRIVATE_FIELDS.items():
        assert hasattr(stock, field), CHANGED.format(version=redis.__version__, field=f"{field} (gone)")
        value = getattr(stock, field)
        assert isinstance(value, types), CHANGED.format(
            version=redis.__version__, field=f"{field} (now a {type(value).__name__}, was one of {types})"
        )
    assert isinstance(stock.max_connections, int), CHANGED.format(version=redis.__version__, field="max_connections")
    for method in ("make_connection", "disconnect", "get_connection", "release"):
        assert callable(getattr(stock, method, None)), CHANGED.format(version=redis.__version__, field=method)
    conn_class = redis.asyncio.Connection
    assert hasattr(conn_class, "can_read") or hasattr(conn_class, "can_read_destructive"), CHANGED.format(
        version=redis.__version__, field="Connection.can_read / can_read_destructive"
    )


def test_redis_py_reads_the_connections_the_lean_pool_keeps() -> None:
    # The fields are the ones redis-py's own pool code reads: its `disconnect` (what the client's
    # aclose runs) closes a connection the lean pool holds idle and one it has lent out.
    async def run() -> None:
        pool = LeanPool(max_connections=2)
        idle, lent = _Conn(), _Conn()
        pool._in_use_connections.update((idle, lent))  # type: ignore[arg-type]
        pool.give(idle)
        assert await pool.take() is idle and (pool.give(idle) is None)
        await pool.disconnect()
        assert (idle.closed, lent.closed) == (1, 1), CHANGED.format(
            version=redis.__version__, field="the connections ConnectionPool.disconnect reads"
        )

    asyncio.run(run())


class _Closed(_Conn):
    """A connection the server closed, as redis-py 8.2's parsers report it: `can_read` raises."""

    connected = 0

    async def can_read_destructive(self) -> bool:
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    can_read = can_read_destructive

    async def connect(self) -> None:
        self.connected += 1


def test_a_connection_the_server_closed_is_made_anew_not_handed_out_again() -> None:
    async def run() -> None:
        pool = LeanPool(max_connections=1)
        dead = _Closed()
        pool._in_use_connections.add(dead)  # type: ignore[arg-type]
        pool.give(dead)
        assert await pool.take() is dead
        assert (dead.closed, dead.connected) == (1, 1)  # disconnected and connected again before use

    asyncio.run(run())


def test_redis_is_capped_below_the_next_major() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in ("redis", "hiredis"):
        spec = next(r for r in project["optional-dependencies"][extra] if r.startswith("redis"))
        cap = re.search(r"<\s*(\d+)", spec)
        assert cap, f"the {extra} extra must cap redis below its next major (the lean pool writes private fields)"
        installed = int(redis.__version__.split(".")[0])
        assert installed < int(cap.group(1)), CHANGED.format(version=redis.__version__, field="its major version")


# --- the async cluster client's gate (CallGate) -------------------------------------------------


def test_the_gate_lets_limit_calls_in_and_the_next_waits_its_turn() -> None:
    async def main() -> None:
        gate = CallGate(2, wait_timeout=5.0)
        await gate.enter()
        await gate.enter()
        third = asyncio.create_task(gate.enter())
        await asyncio.sleep(0.05)
        assert not third.done()  # waiting, not refused as redis-py's node refuses
        gate.leave()
        await asyncio.wait_for(third, 1.0)
        gate.leave()
        gate.leave()

    asyncio.run(main())


def test_a_call_that_finds_no_place_within_pool_timeout_is_a_connection_error() -> None:
    async def main() -> None:
        gate = CallGate(1, wait_timeout=0.1)
        await gate.enter()
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            await gate.enter()
        except redis.exceptions.ConnectionError as exc:
            assert "no free connection within 0.1 s (pool_timeout)" in str(exc)
        else:
            raise AssertionError("a second call entered a gate of one")
        assert 0.09 <= loop.time() - start < 1.0
        gate.leave()
        await asyncio.wait_for(gate.enter(), 1.0)  # the timed-out waiter took no place with it

    asyncio.run(main())


def test_a_cancelled_waiter_takes_no_place_with_it() -> None:
    async def main() -> None:
        gate = CallGate(1, wait_timeout=5.0)
        await gate.enter()
        waiter = asyncio.create_task(gate.enter())
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        gate.leave()
        await asyncio.wait_for(gate.enter(), 1.0)
        gate.leave()

    asyncio.run(main())
