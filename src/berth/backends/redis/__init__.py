"""`redis://[user:pw@]host:port/db?prefix=berth:`: one string per frame, compare-and-swap in Lua.

Keyspace, under a deployment prefix (default `berth:`)::

    {prefix}frame:{name}   a string: the generation as 20 ASCII digits, then the frame

Every write draws a fresh random 62-bit generation, so a generation never repeats
for a name, not even after a delete and re-create, and a save is one SET (no
shared counter to write). A save is a plain `SET` (`SET ... NX` when it must
not exist yet); a save conditional on a generation, and the conditional delete,
are Lua scripts (EVALSHA; EVAL when the server's script cache is empty) that
compare the stored generation and act in one atomic step. Listing walks the
keyspace with `SCAN ... MATCH` (never `KEYS`) and reads only each frame's first
bytes (`GETRANGE`). The prefix is one run of `A-Z a-z 0-9 . _ -` ending in `:`,
so no two prefixes' keys can meet.

Redis acknowledges writes before they are on disk; unless the server runs with
an append-only file, an acknowledged save or claim can be undone by a restart.
Opening a backend checks the server's persistence settings and warns once per
server (`DurabilityWarning`) when that can happen.

The package, by concern: `_wire` (the keyspace, the Lua scripts and the error table, shared
by both backends, no I/O), `_sync` (`RedisBackend` on redis-py, and the durability check),
`_async` (`AsyncRedisBackend` on redis.asyncio), `_pool` (the async backend's lean pool).
"""

from __future__ import annotations

from berth.backends.redis._async import AsyncRedisBackend, AsyncRedisClusterBackend
from berth.backends.redis._sync import DurabilityWarning, RedisBackend, RedisClusterBackend

__all__ = ["AsyncRedisBackend", "AsyncRedisClusterBackend", "DurabilityWarning", "RedisBackend", "RedisClusterBackend"]
