"""`RedisBackend`: frames as Redis strings on redis-py, and the check of the server's durability."""

from __future__ import annotations

import functools
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import redis
import redis.cluster
import redis.exceptions

from berth import _plan
from berth._errors import TokenMismatch, caller_level
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Data, Head, Put, ordered, sorted_names
from berth.backends.redis._slots import NodeRounds, Routed, asked_replies, cluster_url, node_commands, routed_plan
from berth.backends.redis._wire import (
    DELETE,
    ERRORS,
    GEN_DIGITS,
    PUT_IF_MATCH,
    READ_RETRIES,
    RETRIED,
    SCAN_COUNT,
    Keyspace,
    Pipelines,
    Write,
    client_args,
    command_of,
    packed,
    queue,
)

__all__ = [
    "DurabilityWarning",
    "RedisBackend",
    "RedisClusterBackend",
    "check_cluster_durability",
    "check_durability",
    "close_cluster",
    "pages_of",
    "server_of",
]

log = logging.getLogger("berth")

_checked_servers: set[str] = set()
_checked_lock = threading.Lock()


class DurabilityWarning(UserWarning):
    """The Redis server can lose writes it acknowledged (no append-only file, or one never fsynced)."""


def server_of(client: redis.Redis) -> str:
    """Where `client` connects: `host:port`, or a socket's path."""
    kw = client.connection_pool.connection_kwargs
    where = kw.get("path") or f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
    return str(where)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_durability(client: redis.Redis) -> None:
    """Warn once per server and process (`DurabilityWarning`) if its settings can lose acknowledged writes."""
    server = server_of(client)
    with _checked_lock:
        if server in _checked_servers:
            return
        _checked_servers.add(server)
    try:
        problems = _durability_problems(client)
    except redis.exceptions.RedisError as exc:
        with _checked_lock:
            _checked_servers.discard(server)  # check again at the next open
        log.info("berth: could not reach redis at %s to check its persistence: %s", server, exc)
        return
    if problems:
        warnings.warn(
            f"redis at {server} can lose writes it acknowledged: it {'; and it '.join(p for p, _ in problems)}. "
            "A parked run can vanish, and a claimed run can come back and be resumed twice. "
            f"Fix: {'; '.join(fix for _, fix in problems)}. See docs/backends/redis.md",
            DurabilityWarning,
            stacklevel=caller_level(),
        )


def _durability_problems(client: redis.Redis) -> list[tuple[str, str]]:
    """What about the server's settings can lose acknowledged writes: (problem, fix) pairs."""
    config: dict[str, str] = {}
    try:
        for name in ("appendonly", "appendfsync", "save", "maxmemory", "maxmemory-policy"):
            got = client.config_get(name)
            config.update({_str(k): _str(v) for k, v in got.items()})
    except redis.exceptions.ResponseError:  # CONFIG renamed, disabled or not granted: ask INFO
        try:
            info = {**client.info("persistence"), **client.info("memory")}
        except redis.exceptions.ResponseError as exc:
            log.warning(
                "berth: cannot read the persistence settings of redis at %s (%s); make sure it runs "
                "with appendonly yes and maxmemory-policy noeviction, or acknowledged writes can be lost",
                server_of(client),
                exc,
            )
            return []
        config["appendonly"] = "yes" if int(info.get("aof_enabled", 0)) else "no"
        config["maxmemory"] = _str(info.get("maxmemory", 0))
        config["maxmemory-policy"] = _str(info.get("maxmemory_policy", "noeviction"))
        source = " (INFO: aof_enabled:0)"
    else:
        source = ""
    problems = []
    if config.get("appendonly", "no").lower() != "yes":
        snapshots = config.get("save", "").strip()
        since = f"; RDB snapshots only ({snapshots!r})" if snapshots else ("; no snapshots" if "save" in config else "")
        problems.append(
            (
                f"runs without an append-only file (appendonly no{since}){source}",
                "appendonly yes with appendfsync always (or everysec: at most a second lost on a host crash)",
            )
        )
    elif config.get("appendfsync", "everysec").lower() == "no":
        problems.append(("never fsyncs its append-only file itself (appendfsync no)", "appendfsync always"))
    policy = config.get("maxmemory-policy", "noeviction").lower()
    if policy.startswith("allkeys") and config.get("maxmemory", "0") != "0":
        problems.append(
            (f"evicts keys under memory pressure (maxmemory-policy {policy})", "maxmemory-policy noeviction")
        )
    return problems


def check_cluster_durability(client: Any) -> None:
    """`check_durability` of every primary of the cluster (a warning names each server that can lose writes)."""
    for node in client.get_primaries():
        check_durability(client.get_redis_connection(node))


def pages_of(keys: Iterator[str]) -> list[str]:
    """The next page of up to 1,000 keys (empty at the end)."""
    return list(islice(keys, SCAN_COUNT))


class RedisBackend(Backend):
    """Frames as Redis strings under one key prefix; safe across threads, processes and hosts.

    Standalone Redis (or a Sentinel-managed primary): listing SCANs one server's
    keyspace and pipelines its reads there, so Cluster is not supported.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "berth:",
        check_durability: bool = True,
        wait_replicas: int = 0,
        wait_timeout: int = 1000,
    ):
        self.keys = Keyspace(prefix, wait_replicas, wait_timeout)
        self.prefix = self.keys.prefix
        self.client = client
        self._command: Callable[..., Any] = client.execute_command
        self._put_if_match = client.register_script(PUT_IF_MATCH)
        self._delete = client.register_script(DELETE)
        if check_durability:
            self._check_durability()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        """Open `redis://` or `rediss://` with berth's options (`prefix`, `check_durability`,
        `wait_replicas`, `wait_timeout`) from the query or keywords; the rest go to redis-py."""
        client_url, client_options, own = client_args(url, options)
        return cls(redis.Redis.from_url(client_url, **client_options), **own)

    def _check_durability(self) -> None:
        check_durability(self.client)

    # --- the seam ---------------------------------------------------------------------
    #
    # The hot path (save, load, claim) is one redis-py call inside one try block: no
    # context manager, no closure. Writes are never retried; reads are retried on a
    # connection error or a timeout only (`_read_again`).

    def _eval(self, script: Any, key: str, *args: Any) -> Any:
        try:
            return self._command("EVALSHA", script.sha, 1, key, *args)
        except redis.exceptions.NoScriptError:
            return self._command(*command_of(script, key, args, text=True))

    def _waited(self, name: str, script: Any, key: str, *args: Any) -> Any:
        """Run the write (`script` on `key` and `args`, or with no script SET `key` `args`), then
        `WAIT` for the replicas, in one round trip."""
        return self._writes([(script, key, args)], name)[0]

    def _writes(self, writes: Sequence[Write], name: str) -> list[Any]:
        """The replies of `writes`, run on one pipeline (WAIT for the replicas after them when asked)."""
        return _plan.run(self.keys.writes_plan(writes, name), {Pipelines: self})

    def pipeline_round(self, writes: Sequence[Write], *, text: bool) -> list[Any]:
        """One round trip of `Keyspace.writes_plan`: `writes` on a pipeline (by SHA, or by `text`), WAIT
        after them when replicas are asked for; every reply, an error as its exception (nothing raised)."""
        pipe: Any = self.client.pipeline(transaction=False)
        queue(pipe, writes, text, self.keys.wait if self.keys.replicas else None)
        return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    def _read_again(self, exc: redis.exceptions.RedisError, what: str, name: str, call: Callable[[], Any]) -> Any:
        """`call` (an idempotent read) failed with `exc`: retry it after a connection error or a timeout."""
        if not isinstance(exc, RETRIED):
            raise ERRORS.error(exc, what, name) from exc
        for pause in READ_RETRIES:
            time.sleep(pause)
            try:
                return call()
            except RETRIED as again:
                exc = again
            except redis.exceptions.RedisError as other:
                raise ERRORS.error(other, what, name) from other
        raise ERRORS.error(exc, what, name) from exc

    def _read(self, call: Callable[[], Any], what: str, name: str) -> Any:
        try:
            return call()
        except redis.exceptions.RedisError as exc:
            return self._read_again(exc, what, name, call)

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` with a new generation (conditionally if asked)."""
        if if_match is not None:
            return self._put_matching(name, data, if_match, if_absent)
        key, value, gen = self.keys.new_value(name, data)
        # SET replaces the value atomically, as the script did; NX writes nothing if the key exists.
        args = (key, value, "NX") if if_absent else (key, value)
        try:
            if self.keys.replicas:
                done = self._waited(name, None, *args)
            else:
                done = self._command("SET", *args)
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "save", name) from exc
        return self.keys.put_token(name, done, gen, "already exists")

    def _put_matching(self, name: str, data: bytes, if_match: Token, if_absent: bool) -> Token:
        expected = self.keys.expected(name, if_match, if_absent)
        key, value, gen = self.keys.new_value(name, data)
        try:
            if self.keys.replicas:
                done = self._waited(name, self._put_if_match, key, value, expected)
            else:
                done = self._eval(self._put_if_match, key, value, expected)
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "save", name) from exc
        return self.keys.put_token(name, done is not None, gen, "changed since it was read")

    def get(self, name: str) -> tuple[Data, Token] | None:
        """The frame under `name` and its generation, or None.

        A frame of 1 MiB or more comes back as a `memoryview` of the reply (no copy)."""
        key = self.keys.frames + name
        try:
            raw = self._command("GET", key)
        except redis.exceptions.RedisError as exc:
            raw = self._read_again(exc, "load", name, functools.partial(self._command, "GET", key))
        return self.keys.got(name, raw)

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        key, expected = self.keys.delete_args(name, token)
        try:
            if self.keys.replicas:
                deleted = self._waited(name, self._delete, key, expected)
            else:
                deleted = self._eval(self._delete, key, expected)
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "delete", name) from exc
        self.keys.deleted(name, token, deleted)

    def _batches(self, prefix: str) -> Iterator[list[str]]:
        return self._scanned(self.client, prefix)

    def _scanned(self, server: redis.Redis, prefix: str) -> Iterator[list[str]]:
        # SCAN in batches: the server keeps no state between calls, so a slow
        # consumer holds nothing; a key present throughout is seen at least once.
        match = self.keys.match(prefix)
        cursor: int = 0
        while True:
            cursor, keys = self._read(
                functools.partial(server.scan, cursor, match=match, count=SCAN_COUNT), "list", prefix
            )
            names = self.keys.ours(keys, prefix)
            if names:
                yield names
            if int(cursor) == 0:
                return

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix` (in no particular order), a SCAN batch at a time."""
        skip = len(self.keys.frames)
        for keys in self._batches(prefix):
            for key in keys:
                yield key[skip:]

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`."""
        return self._heads_of(self._batches(prefix), size, prefix)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order.

        Redis keeps no order: the names under the prefix are SCANned (names only, no
        frame bytes) and ordered -- O(limit) with a limit (a heap), else in bounded memory
        (`ordered`: past 16,384 names, sorted in buckets spilled to an anonymous temporary
        file) -- and the heads of the ones wanted read in pipelined batches.
        """
        names = (key for batch in self._batches(prefix) for key in batch)
        keys = ordered(names, reverse=reverse) if limit is None else iter(sorted_names(names, limit, reverse))
        return self._heads_of(iter(functools.partial(pages_of, keys), []), size, prefix)

    def _heads_of(self, batches: Iterable[list[str]], size: int, prefix: str) -> Iterator[Head]:
        for keys in batches:
            replies = self._read(functools.partial(self._read_heads, keys, size), "list", prefix)
            yield from self.keys.head_rows(keys, replies)

    def _read_heads(self, keys: list[str], size: int) -> list[Any]:
        """GETRANGE and STRLEN replies of each key, in pairs: native reads, packed by hand, two round trips at most.

        A head shorter than asked for is the whole value, so its length is known: STRLEN goes
        only to the longer ones. (A Lua script over the batch made head and length agree, but
        cost the server ~8× these reads; redis-py's pipeline cost more client CPU per command
        than the rest of a listing.)
        """
        end = size + GEN_DIGITS - 1
        heads = self._replies(packed(b"GETRANGE", keys, b"0", b"%d" % end), len(keys))
        longer = [i for i, head in enumerate(heads) if isinstance(head, bytes) and len(head) > end]
        lengths = dict(
            zip(longer, self._replies(packed(b"STRLEN", [keys[i] for i in longer]), len(longer)), strict=True)
        )
        replies: list[Any] = []
        for i, head in enumerate(heads):
            replies += (head, lengths.get(i, head if isinstance(head, Exception) else len(head)))
        return replies

    def _replies(self, packed: bytes, count: int) -> list[Any]:
        """Send `packed` (`count` commands) on a pooled connection and read their replies, error replies in place."""
        if not count:
            return []
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in range(count):
                try:
                    replies.append(conn.read_response())
                except redis.exceptions.ResponseError as exc:  # this command's error reply; the rest follow
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]  # replies may be left unread: never reuse it
            raise
        finally:
            pool.release(conn)
        return replies

    def get_many(self, names: Sequence[str]) -> list[tuple[Data, Token] | None]:
        """Every name's frame and generation (or None), in one MGET."""
        if not names:
            return []
        keys = [self.keys.frames + name for name in names]
        raws = self._read(functools.partial(self._command, "MGET", *keys), "load", names[0])
        return [self.keys.got(name, raw) for name, raw in zip(names, raws, strict=True)]

    def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        """Every item on one pipeline (one round trip; not a transaction: each write is atomic alone)."""
        writes, gens = self.keys.put_writes(items, self._put_if_match)
        if not writes:
            return self.keys.put_outcomes(items, gens, [])
        try:
            replies = self._writes(writes, items[0].name)
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "save", items[0].name) from exc
        return self.keys.put_outcomes(items, gens, replies)

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Delete each name still at its token: one pipeline of compare-and-delete scripts (one round trip)."""
        writes, first = self.keys.delete_writes(items, self._delete)
        if first is None:
            return [False] * len(items)
        try:
            results = self._writes(writes, first)
        except redis.exceptions.RedisError as exc:
            raise ERRORS.error(exc, "delete", first) from exc
        return self.keys.deleted_many(items, results)

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its token (a listing's long header)."""
        key = self.keys.frames + name
        raw = self._read(functools.partial(self._command, "GETRANGE", key, 0, size + GEN_DIGITS - 1), "list", name)
        return self.keys.got_head(name, raw)

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisBackend({server_of(self.client)}, prefix={self.prefix!r})"


def close_cluster(client: Any) -> None:
    """Close a redis-py `RedisCluster` and every node's connections.

    `RedisCluster.close` closes each node's client, but a cluster opened from a URL gives each node
    a pool of its own that the node's client does not close (its `auto_close_connection_pool` is
    off): without this their sockets stay open until collected.
    """
    nodes = client.get_nodes()
    client.close()
    for node in nodes:
        if node.redis_connection is not None:
            node.redis_connection.connection_pool.disconnect()


class RedisClusterBackend(RedisBackend):
    """`RedisBackend` on a Redis Cluster (`redis+cluster://`): the same keys, scripts and semantics.

    Every command goes to the primary of its key's slot (redis-py's `RedisCluster`, which follows
    MOVED and ASK and never re-sends a command whose connection failed); what touches many keys
    is split by slot (MGET) or by node (a pipeline of writes with its WAIT, a listing's reads);
    a listing SCANs every primary. See `berth.backends.redis._slots`.
    """

    client: Any

    def __init__(
        self,
        client: redis.cluster.RedisCluster,
        *,
        prefix: str = "berth:",
        check_durability: bool = True,
        wait_replicas: int = 0,
        wait_timeout: int = 1000,
    ):
        super().__init__(
            client,  # type: ignore[arg-type]
            prefix=prefix,
            check_durability=check_durability,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisClusterBackend:
        """Open `redis+cluster://host:port[,host:port...]` (`rediss+cluster://` for TLS) with berth's
        options (as `RedisBackend.from_url`); every host given is a startup node."""
        client_url, others = cluster_url(url)
        client_url, client_options, own = client_args(client_url, options)
        node: Any = redis.cluster.ClusterNode
        client_options["startup_nodes"] = [node(h, p) for h, p in others]
        return cls(redis.cluster.RedisCluster.from_url(client_url, **client_options), **own)

    def _check_durability(self) -> None:
        check_cluster_durability(self.client)

    # --- writes on a node's pipeline, routed by slot --------------------------------------

    def pipeline_round(self, writes: Sequence[Write], *, text: bool) -> list[Any]:
        """`RedisBackend.pipeline_round` over the cluster: `writes` on one pipeline per node, each
        with its own WAIT (`routed_plan`)."""
        plan = routed_plan(writes, text, bool(self.keys.replicas), self.client.get_node_from_key, self._node_at)
        return _plan.run(plan, {NodeRounds: self})

    def _node_at(self, host: str, port: int) -> Any:
        return self.client.get_node(host=host, port=port)

    def node_round(self, node: Any, sends: Sequence[Routed], text: bool) -> list[Any]:
        """`NodeRounds.node_round` on `node`'s own client (one connection for the round and its WAIT)."""
        pipe: Any = self.client.get_redis_connection(node).pipeline(transaction=False)
        for command in node_commands(sends, text, self.keys.wait if self.keys.replicas else None):
            pipe.execute_command(*command)
        try:
            replies = pipe.execute(raise_on_error=False)
        except RETRIED:
            self.refresh()  # the node may be gone: the next call routes by a fresh map
            raise
        return asked_replies(sends, replies)

    def refresh(self) -> None:
        """`NodeRounds.refresh`: reload the slot map from the cluster."""
        self.client.nodes_manager.initialize()

    # --- reads over many keys ---------------------------------------------------------------

    def _batches(self, prefix: str) -> Iterator[list[str]]:
        # Every primary's keyspace, one after another: a frame lives on the primary of its slot.
        for node in self.client.get_primaries():
            yield from self._scanned(self.client.get_redis_connection(node), prefix)

    def _read_heads(self, keys: list[str], size: int) -> list[Any]:
        # On redis-py's cluster pipeline: split by node, MOVED and ASK followed (a key moved since the SCAN).
        pipe: Any = self.client.pipeline(transaction=False)
        end = size + GEN_DIGITS - 1
        for key in keys:
            pipe.execute_command("GETRANGE", key, 0, end)
            pipe.execute_command("STRLEN", key)
        return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    def get_many(self, names: Sequence[str]) -> list[tuple[Data, Token] | None]:
        """Every name's frame and generation (or None): one MGET per slot, pipelined per node."""
        if not names:
            return []
        keys = [self.keys.frames + name for name in names]
        raws = self._read(functools.partial(self.client.mget_nonatomic, keys), "load", names[0])
        return [self.keys.got(name, raw) for name, raw in zip(names, raws, strict=True)]

    def close(self) -> None:
        """Close every node's connections (`close_cluster`)."""
        close_cluster(self.client)

    def __repr__(self) -> str:
        nodes = ",".join(node.name for node in self.client.get_primaries())
        return f"RedisClusterBackend({nodes}, prefix={self.prefix!r})"
