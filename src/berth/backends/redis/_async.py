"""`AsyncRedisBackend`: `RedisBackend` awaited, on redis.asyncio (imported only when one is opened)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import redis
import redis.exceptions
from redis.backoff import NoBackoff

from berth import _plan
from berth._errors import TokenMismatch
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends._aio import AsyncBackend
from berth.backends._bulk import Data, Head, Ordering, Put, sorted_names
from berth.backends.redis._slots import NodeRounds, Routed, asked_replies, cluster_url, node_commands, routed_plan
from berth.backends.redis._sync import (
    RedisBackend,
    RedisClusterBackend,
    check_cluster_durability,
    check_durability,
    pages_of,
    server_of,
)
from berth.backends.redis._wire import (
    DELETE,
    ERRORS,
    GEN_DIGITS,
    PUT_IF_MATCH,
    READ_RETRIES,
    RETRIED,
    SCAN_COUNT,
    Pipelines,
    Write,
    client_args,
    command_of,
    queue,
)

__all__ = ["AsyncRedisBackend", "AsyncRedisClusterBackend"]

_ASYNC_HEADS = 128  # heads per pipelined read of the async backend


def _pool_class() -> Any:
    """`LeanPool` (its module imports redis.asyncio: only async stores do)."""
    from berth.backends.redis._pool import LeanPool

    return LeanPool


class AsyncRedisBackend(AsyncBackend):
    """`RedisBackend` awaited, on `redis.asyncio`: the same keys, scripts and semantics.

    Holds a `RedisBackend` (`sync`, the sync twin every async backend offers) and its
    `Keyspace` (`keys`: the checks before a call and the reading of replies); its own
    client is `redis.asyncio.Redis` on a blocking pool of `max_connections` (default 50)
    where a task waits up to `pool_timeout` seconds (default: the socket timeout) for a
    connection. The server's durability check runs once, in a worker thread, on first use.

    The pool is berth's (`LeanPool`, a `redis.asyncio.ConnectionPool`): taking and
    giving back a connection is a list pop and append, waiters queue in order, a
    connection the server closed is reconnected before use, and a forked child starts
    with an empty pool. The calls of save, load and claim (SET, GET, EVALSHA, GETRANGE,
    MGET) are packed and read on a pooled connection directly, under one timer for
    the whole call: redis.asyncio's client path (a retry wrapper, a condition, a
    task per send for its socket timeout, metrics) cost more client CPU per cycle
    than the whole sync call (docs/benchmarks.md).
    """

    sync: RedisBackend

    def __init__(self, sync: RedisBackend, client: Any, *, check_durability: bool = True, call_timeout: float = 10.0):
        self.sync = sync
        self.keys = sync.keys
        self.client = client
        self._timeout = call_timeout
        pool = getattr(client, "connection_pool", None)  # a cluster client has one per node
        # On berth's own pool the hot calls go straight to a pooled connection (`_call`);
        # on any other (a client given by hand, a cluster's) through the client.
        self._command = self._call if isinstance(pool, _pool_class()) else client.execute_command
        self._put_if_match = client.register_script(PUT_IF_MATCH)
        self._delete = client.register_script(DELETE)
        self._check = check_durability

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisBackend:
        import redis.asyncio.retry

        options = dict(options)
        pool_timeout = options.pop("pool_timeout", None)
        client_url, client_options, own = client_args(url, dict(options))
        check = own.pop("check_durability", True)
        sync = RedisBackend(redis.Redis.from_url(client_url, **client_options), check_durability=False, **own)
        client_url, client_options, _ = client_args(url, dict(options), redis.asyncio.retry.Retry(NoBackoff(), 0))
        client_options.setdefault("max_connections", 50)
        pool = _pool_class().from_url(client_url, **client_options)
        # The socket timeout bounds each whole berth call (one timer) instead of each socket
        # operation (redis.asyncio starts a task per send for it): see AsyncRedisBackend._timed.
        call_timeout = pool.connection_kwargs.get("socket_timeout") or 10.0
        pool.connection_kwargs["socket_timeout"] = None
        pool.wait_timeout = pool_timeout if pool_timeout is not None else call_timeout
        return cls(sync, redis.asyncio.Redis.from_pool(pool), check_durability=check, call_timeout=call_timeout)

    def __repr__(self) -> str:
        return f"AsyncRedisBackend({server_of(self.sync.client)}, prefix={self.keys.prefix!r})"

    async def _checked(self) -> None:
        if self._check:
            self._check = False
            await asyncio.to_thread(check_durability, self.sync.client)

    async def _call(self, *args: Any) -> Any:
        """One command on a pooled connection, its raw reply (callers run it under `_timed`)."""
        pool = self.client.connection_pool
        conn = await pool.take()
        try:
            # A failed or cancelled send or read disconnects the connection (redis.asyncio's own
            # rule): it is given back closed and reconnects when next taken.
            await conn.send_packed_command(conn.pack_command(*args), check_health=False)
            return await conn.read_response()
        finally:
            pool.give(conn)

    async def _timed(self, call: Callable[[], Any]) -> Any:
        try:
            async with asyncio.timeout(self._timeout):
                return await call()
        except TimeoutError:  # the timer above (redis' own TimeoutError is a RedisError)
            raise redis.exceptions.TimeoutError(f"no reply within {self._timeout:g} s") from None

    async def _write(self, name: str, what: str, script: Any, key: str, *args: Any) -> Any:
        """A write (`script` on `key` and `args`, or with no script SET `key` `args`); with replicas
        to wait for, on a pipeline with WAIT after it (one round trip)."""
        await self._checked()
        try:
            if self.keys.replicas:
                return (await self._timed(functools.partial(self._writes, [(script, key, args)], name)))[0]
            try:
                return await self._timed(functools.partial(self._command, *command_of(script, key, args)))
            except redis.exceptions.NoScriptError:  # the script did not run: by its text (see `_command_of`)
                return await self._timed(functools.partial(self._command, *command_of(script, key, args, text=True)))
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, what, name) from exc

    async def _writes(self, writes: Sequence[Write], name: str) -> list[Any]:
        """RedisBackend._writes, on redis.asyncio."""
        return await _plan.arun(self.keys.writes_plan(writes, name), {Pipelines: self})

    async def pipeline_round(self, writes: Sequence[Write], *, text: bool) -> list[Any]:
        """RedisBackend.pipeline_round, on redis.asyncio."""
        pipe = self.client.pipeline(transaction=False)
        queue(pipe, writes, text, self.keys.wait if self.keys.replicas else None)
        return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    async def _read(self, call: Callable[[], Any], what: str, name: str) -> Any:
        await self._checked()
        try:
            return await self._timed(call)
        except redis.exceptions.RedisError as exc:
            if not isinstance(exc, RETRIED):
                raise ERRORS.error(exc, what, name) from exc
            last = exc
        for pause in READ_RETRIES:
            await asyncio.sleep(pause)
            try:
                return await self._timed(call)
            except RETRIED as again:
                last = again
            except redis.exceptions.RedisError as other:
                raise ERRORS.error(other, what, name) from other
        raise ERRORS.error(last, what, name) from last

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        if len(data) >= LARGE_FRAME:
            # Sent by the sync client in a worker thread: redis.asyncio joins and buffers a large
            # command's bytes on the event loop (~9 ms per call at 48 MiB, many calls per frame).
            await self._checked()
            put = functools.partial(self.sync.put, name, data, if_match=if_match, if_absent=if_absent)
            return await asyncio.to_thread(put)
        keys = self.keys
        if if_match is not None:
            expected = keys.expected(name, if_match, if_absent)
            key, value, gen = keys.new_value(name, data)
            done = await self._write(name, "save", self._put_if_match, key, value, expected)
            return keys.put_token(name, done is not None, gen, "changed since it was read")
        key, value, gen = keys.new_value(name, data)
        args = (key, value, "NX") if if_absent else (key, value)
        done = await self._write(name, "save", None, *args)
        return keys.put_token(name, done, gen, "already exists")

    async def get(self, name: str) -> tuple[Data, Token] | None:
        key = self.keys.frames + name
        return self.keys.got(name, await self._read(lambda: self._command("GET", key), "load", name))

    async def delete(self, name: str, token: Token) -> None:
        key, expected = self.keys.delete_args(name, token)
        deleted = await self._write(name, "delete", self._delete, key, expected)
        self.keys.deleted(name, token, deleted)

    def _batches(self, prefix: str) -> AsyncIterator[list[str]]:
        return self._scanned(
            functools.partial(self.client.scan, match=self.keys.match(prefix), count=SCAN_COUNT), prefix
        )

    async def _scanned(self, scan: Callable[[int], Any], prefix: str) -> AsyncIterator[list[str]]:
        cursor: int = 0
        while True:
            cursor, keys = await self._read(functools.partial(scan, cursor), "list", prefix)
            names = self.keys.ours(keys, prefix)
            if names:
                yield names
            if int(cursor) == 0:
                return

    async def _heads_of(self, batches: AsyncIterator[list[str]], size: int, prefix: str) -> AsyncIterator[Head]:
        async for batch in batches:
            # A pipelined read per _ASYNC_HEADS keys, not per SCAN batch: parsing the replies of
            # 1,000 heads (~1 MiB) is one step of the event loop.
            for i in range(0, len(batch), _ASYNC_HEADS):
                keys = batch[i : i + _ASYNC_HEADS]
                replies = await self._read(functools.partial(self._read_heads, keys, size), "list", prefix)
                for row in self.keys.head_rows(keys, replies):
                    yield row

    async def _read_heads(self, keys: list[str], size: int) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        end = size + GEN_DIGITS - 1
        for key in keys:
            pipe.execute_command("GETRANGE", key, 0, end)
            pipe.execute_command("STRLEN", key)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    def heads(self, prefix: str, size: int) -> AsyncIterator[Head]:
        return self._heads_of(self._batches(prefix), size, prefix)

    async def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> AsyncIterator[Head]:
        if limit is not None:
            names = [key async for batch in self._batches(prefix) for key in batch]
            if len(names) > SCAN_COUNT:  # ordering many names is milliseconds of CPU: not on the loop
                keys = await asyncio.to_thread(sorted_names, names, limit, reverse)
            else:
                keys = sorted_names(names, limit, reverse)
            del names
            pages: Callable[[], Any] = functools.partial(pages_of, iter(keys))
        with Ordering(reverse=reverse) as ordering:
            if limit is None:  # flat memory, as the sync listing (`ordered`)
                async for batch in self._batches(prefix):
                    if ordering.spills(len(batch)):
                        await asyncio.to_thread(ordering.add, batch)  # sorting and spilling: not on the loop
                    else:
                        ordering.add(batch)
                pages = functools.partial(pages_of, iter(ordering))

            async def batches() -> AsyncIterator[list[str]]:
                while keys := (await asyncio.to_thread(pages) if ordering.spilled else pages()):
                    yield keys

            async for row in self._heads_of(batches(), size, prefix):
                yield row

    async def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        key = self.keys.frames + name
        raw = await self._read(lambda: self._command("GETRANGE", key, 0, size + GEN_DIGITS - 1), "list", name)
        return self.keys.got_head(name, raw)

    async def get_many(self, names: Sequence[str]) -> list[tuple[Data, Token] | None]:
        if not names:
            return []
        keys = [self.keys.frames + name for name in names]
        raws = await self._read(lambda: self._command("MGET", *keys), "load", names[0])
        return [self.keys.got(name, raw) for name, raw in zip(names, raws, strict=True)]

    async def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        await self._checked()
        writes, gens = self.keys.put_writes(items, self._put_if_match)
        if not writes:
            return self.keys.put_outcomes(items, gens, [])
        try:
            replies = await self._timed(functools.partial(self._writes, writes, items[0].name))
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "save", items[0].name) from exc
        return self.keys.put_outcomes(items, gens, replies)

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        await self._checked()
        writes, first = self.keys.delete_writes(items, self._delete)
        if first is None:
            return [False] * len(items)
        try:
            results = await self._timed(functools.partial(self._writes, writes, first))
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "delete", first) from exc
        return self.keys.deleted_many(items, results)

    async def aclose(self) -> None:
        await self.client.aclose()
        await asyncio.to_thread(self.sync.close)


class AsyncRedisClusterBackend(AsyncRedisBackend):
    """`RedisClusterBackend` awaited, on `redis.asyncio.cluster.RedisCluster`: the same keys, scripts,
    routing and semantics (`berth.backends.redis._slots`).

    Its client keeps up to `max_connections` (default 50) connections per node. redis-py's node
    refuses a call at once when all are in use (`MaxConnectionsError`), so at most that many calls
    run at once (`CallGate`: each holds one connection per node at most) and the next waits up to
    `pool_timeout` seconds (default: the socket timeout), as on one server's pool.
    """

    sync: RedisClusterBackend

    def __init__(
        self,
        sync: RedisClusterBackend,
        client: Any,
        *,
        check_durability: bool = True,
        call_timeout: float = 10.0,
        pool_timeout: float | None = None,
    ):
        from berth.backends.redis._pool import CallGate

        super().__init__(sync, client, check_durability=check_durability, call_timeout=call_timeout)
        per_node = client.nodes_manager.connection_kwargs.get("max_connections", 100)  # redis-py's default
        self._gate = CallGate(per_node, pool_timeout or call_timeout)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisClusterBackend:
        import redis.asyncio.cluster
        import redis.asyncio.retry
        import redis.cluster

        options = dict(options)
        pool_timeout = options.pop("pool_timeout", None)  # the gate's, as the standalone pool's
        client_url, others = cluster_url(url)
        sync_url, sync_options, own = client_args(client_url, dict(options))
        check = own.pop("check_durability", True)
        sync_node: Any = redis.cluster.ClusterNode
        sync_options["startup_nodes"] = [sync_node(h, p) for h, p in others]
        sync_client = redis.cluster.RedisCluster.from_url(sync_url, **sync_options)
        sync = RedisClusterBackend(sync_client, check_durability=False, **own)
        retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
        client_url, client_options, _ = client_args(client_url, dict(options), retry)
        client_options["startup_nodes"] = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in others]
        client_options.setdefault("max_connections", 50)
        call_timeout = client_options.get("socket_timeout") or 10.0
        client = redis.asyncio.cluster.RedisCluster.from_url(client_url, **client_options)
        return cls(sync, client, check_durability=check, call_timeout=call_timeout, pool_timeout=pool_timeout)

    def __repr__(self) -> str:
        return "Async" + repr(self.sync)

    async def _timed(self, call: Callable[[], Any]) -> Any:
        await self._gate.enter()
        try:
            return await super()._timed(call)
        finally:
            self._gate.leave()

    async def _checked(self) -> None:
        await self.client.initialize()  # the slot map, before routing by it (a no-op once loaded)
        if self._check:
            self._check = False
            await asyncio.to_thread(check_cluster_durability, self.sync.client)

    async def pipeline_round(self, writes: Sequence[Write], *, text: bool) -> list[Any]:
        """`RedisClusterBackend.pipeline_round`, on redis.asyncio."""
        plan = routed_plan(writes, text, bool(self.keys.replicas), self.client.get_node_from_key, self._node_at)
        return await _plan.arun(plan, {NodeRounds: self})

    def _node_at(self, host: str, port: int) -> Any:
        return self.client.get_node(host=host, port=port)

    async def node_round(self, node: Any, sends: Sequence[Routed], text: bool) -> list[Any]:
        """`RedisClusterBackend.node_round`, on the node's own connection."""
        from redis.asyncio.cluster import PipelineCommand

        wait = self.keys.wait if self.keys.replicas else None
        commands = [PipelineCommand(i, *command) for i, command in enumerate(node_commands(sends, text, wait))]
        try:
            await node.execute_pipeline(commands)
        except RETRIED:
            await self.refresh()
            raise
        replies = [command.result for command in commands]
        if any(isinstance(reply, RETRIED) for reply in replies):
            await self.refresh()
        return asked_replies(sends, replies)

    async def refresh(self) -> None:
        """`NodeRounds.refresh`, awaited."""
        await self.client.nodes_manager.initialize()

    def _batches(self, prefix: str) -> AsyncIterator[list[str]]:
        return self._every_primary(prefix)

    async def _every_primary(self, prefix: str) -> AsyncIterator[list[str]]:
        await self._checked()
        match = self.keys.match(prefix)
        for node in self.client.get_primaries():
            scan = functools.partial(self._scan_node, node, match)
            async for batch in self._scanned(scan, prefix):
                yield batch

    async def _scan_node(self, node: Any, match: str, cursor: int) -> Any:
        cursor, keys = await self.client.execute_command(
            "SCAN", cursor, "MATCH", match, "COUNT", SCAN_COUNT, target_nodes=node
        )
        return (cursor[node.name] if isinstance(cursor, dict) else cursor), keys  # redis-py's cursor: by node

    async def get_many(self, names: Sequence[str]) -> list[tuple[Data, Token] | None]:
        if not names:
            return []
        keys = [self.keys.frames + name for name in names]
        raws = await self._read(lambda: self.client.mget_nonatomic(keys), "load", names[0])
        return [self.keys.got(name, raw) for name, raw in zip(names, raws, strict=True)]
