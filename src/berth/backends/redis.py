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
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import secrets
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from berth import _plan
from berth._errors import BackendError, BerthError, FormatError, TokenMismatch, caller_level
from berth._plan import Plan, call
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends import Backend
from berth.backends._aio import AsyncBackend, expire
from berth.backends._bulk import Data, Head, Ordering, ordered, sorted_names
from berth.backends._errmap import ErrorMap, Row

__all__ = ["AsyncRedisBackend", "DurabilityWarning", "RedisBackend"]

log = logging.getLogger("berth")

_GEN_DIGITS = 20
_SCAN_COUNT = 1000
_ASYNC_HEADS = 128  # heads per pipelined read of the async backend
_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,64}:")
_GLOB = re.compile(r"([\\*?\[\]])")
_READ_RETRIES = (0.05, 0.25)  # idempotent reads retry after these pauses; writes never retry
_RETRIED = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_READ_SIZE = 1 << 17  # bytes a connection reads at a time (its buffer): a 64 KiB frame's reply in one read
_VIEW_FROM = LARGE_FRAME  # `get` returns frames this large as a view of the reply instead of a copy
_URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "prefix": str,
    "check_durability": lambda v: v.lower() in ("1", "true", "yes", "on"),
    "wait_replicas": int,
    "wait_timeout": int,
}

_checked_servers: set[str] = set()
_checked_lock = threading.Lock()

# KEYS: frame. ARGV: generation (20 digits) + data, expected generation (20 digits).
# Only a save conditional on a generation runs it: a plain save is `SET`, `if_absent` is `SET NX`.
_PUT_IF_MATCH = """
if redis.call('GETRANGE', KEYS[1], 0, 19) ~= ARGV[2] then return false end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
# KEYS: frame. ARGV: expected generation (20 digits).
_DELETE = """
if redis.call('GETRANGE', KEYS[1], 0, 19) == ARGV[1] then
  redis.call('UNLINK', KEYS[1])
  return 1
end
return 0
"""


def _packed(command: bytes, keys: list[str], *args: bytes) -> bytes:
    """`command key *args` for each key, packed as one RESP request (one write, one round trip)."""
    before = b"*%d\r\n$%d\r\n%s\r\n" % (2 + len(args), len(command), command)
    after = b"".join(b"\r\n$%d\r\n%s" % (len(a), a) for a in args) + b"\r\n"
    parts = []
    for key in keys:
        k = key.encode()
        parts.append(b"%s$%d\r\n%s%s" % (before, len(k), k, after))
    return b"".join(parts)


_ERRORS = ErrorMap(
    "redis",
    [
        Row(
            redis.exceptions.ResponseError,
            FormatError,
            "redis value for {name!r} is not a berth frame (a value of another type)",
            lambda exc, call: str(exc).startswith("WRONGTYPE"),
        ),
        Row(redis.exceptions.RedisError),
    ],
)


class DurabilityWarning(UserWarning):
    """The Redis server can lose writes it acknowledged (no append-only file, or one never fsynced)."""


def _command_of(script: Any, key: str, args: tuple[Any, ...], *, text: bool = False) -> tuple[Any, ...]:
    """The command of a write: `script` (a registered Script) on `key` and `args` by its SHA, or
    with `text` by its source; with no script, SET `key` `args`.

    A NOSCRIPT answer to the SHA means the script did not run (a restart, a failover or a SCRIPT
    FLUSH emptied the server's cache), so the write is sent again by its source: EVAL runs it and
    caches it, and no SCRIPT LOAD in between can be raced by another flush."""
    if script is None:
        return ("SET", key, *args)
    return ("EVAL", script.script, 1, key, *args) if text else ("EVALSHA", script.sha, 1, key, *args)


_Write = tuple[Any, str, tuple[Any, ...]]
"""A write on a pipeline: (registered Script, or None for SET; key; arguments)."""


def _queue(pipe: Any, writes: Sequence[_Write], text: bool, wait: tuple[int, int] | None) -> None:
    # Each command goes on the pipeline as it is: a Script on a pipeline would add a round trip
    # of SCRIPT EXISTS to every execute (and a SCRIPT FLUSH can still fall after it).
    for script, key, args in writes:
        pipe.execute_command(*_command_of(script, key, args, text=text))
    if wait is not None:
        pipe.wait(*wait)


def _settle(replies: list[Any], waited: int) -> tuple[list[Any], int]:
    """A pipeline's replies without its WAIT's, and how many replicas that acknowledged (0 if none waited)."""
    if not waited:
        return replies, 0
    acked = replies.pop()
    if isinstance(acked, Exception):
        raise acked
    return replies, int(acked)


def _gen_text(value: int) -> bytes:
    return b"%020d" % value


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _client_args(url: str, options: dict[str, Any], retry: Any = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(URL for redis-py, options for redis-py, berth's own options) of a `redis://` URL and keywords."""
    parts = urlsplit(url)
    kept = []
    for item in parts.query.split("&") if parts.query else []:
        raw_key, _, raw_value = item.partition("=")
        key, value = unquote(raw_key), unquote(raw_value)
        convert = _URL_OPTIONS.get(key)
        if convert is None:
            kept.append(item)
            continue
        try:
            options.setdefault(key, convert(value))
        except ValueError:
            raise BerthError(f"redis URL option {key}={value!r} is not valid") from None
    own = {k: options.pop(k) for k in list(options) if k in _URL_OPTIONS}
    for forbidden in ("decode_responses", "retry", "retry_on_error", "retry_on_timeout"):
        if forbidden in options:
            raise BerthError(f"redis option {forbidden!r} is berth's to set, not the caller's")
    options.setdefault("socket_timeout", 10.0)
    options.setdefault("socket_connect_timeout", 5.0)
    # redis-py reads a reply 64 KiB at a time by default: a 64 KiB state's frame (its header and
    # the generation on top) took two reads, two polls and a reader buffer grown by a moving realloc.
    options.setdefault("socket_read_size", _READ_SIZE)
    # No automatic retries: a write whose reply was lost may have happened,
    # and re-running a claim could turn a win into a reported loss.
    options["retry"] = retry if retry is not None else Retry(NoBackoff(), 0)
    options["decode_responses"] = False
    return urlunsplit(parts._replace(query="&".join(kept))), options, own


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
        if isinstance(prefix, str) and prefix and not prefix.endswith(":"):
            prefix += ":"
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise BerthError(f"redis prefix {prefix!r} must be 1-64 of A-Z a-z 0-9 . _ - followed by ':'")
        if wait_replicas < 0 or wait_timeout < 0:
            raise BerthError("redis wait_replicas and wait_timeout must not be negative")
        self.prefix = prefix
        self.client = client
        self._frames = prefix + "frame:"
        self._wait = (wait_replicas, wait_timeout)
        self._replicas = wait_replicas
        self._command: Callable[..., Any] = client.execute_command
        self._put_if_match = client.register_script(_PUT_IF_MATCH)
        self._delete = client.register_script(_DELETE)
        if check_durability:
            self._check_durability()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        """Open `redis://` or `rediss://` with berth's options (`prefix`, `check_durability`,
        `wait_replicas`, `wait_timeout`) from the query or keywords; the rest go to redis-py."""
        client_url, client_options, own = _client_args(url, options)
        return cls(redis.Redis.from_url(client_url, **client_options), **own)

    # --- durability -------------------------------------------------------------------

    def _server(self) -> str:
        kw = self.client.connection_pool.connection_kwargs
        where = kw.get("path") or f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
        return str(where)

    def _check_durability(self) -> None:
        server = self._server()
        with _checked_lock:
            if server in _checked_servers:
                return
            _checked_servers.add(server)
        try:
            problems = self._durability_problems()
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

    def _durability_problems(self) -> list[tuple[str, str]]:
        """What about the server's settings can lose acknowledged writes: (problem, fix) pairs."""
        config: dict[str, str] = {}
        try:
            for name in ("appendonly", "appendfsync", "save", "maxmemory", "maxmemory-policy"):
                got = self.client.config_get(name)
                config.update({_str(k): _str(v) for k, v in got.items()})
        except redis.exceptions.ResponseError:  # CONFIG renamed, disabled or not granted: ask INFO
            try:
                info = {**self.client.info("persistence"), **self.client.info("memory")}
            except redis.exceptions.ResponseError as exc:
                log.warning(
                    "berth: cannot read the persistence settings of redis at %s (%s); make sure it runs "
                    "with appendonly yes and maxmemory-policy noeviction, or acknowledged writes can be lost",
                    self._server(),
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
            since = (
                f"; RDB snapshots only ({snapshots!r})" if snapshots else ("; no snapshots" if "save" in config else "")
            )
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

    # --- the seam ---------------------------------------------------------------------
    #
    # The hot path (save, load, claim) is one redis-py call inside one try block: no
    # context manager, no closure. Writes are never retried; reads are retried on a
    # connection error or a timeout only (`_read_again`).

    def _eval(self, script: Any, key: str, *args: Any) -> Any:
        try:
            return self._command("EVALSHA", script.sha, 1, key, *args)
        except redis.exceptions.NoScriptError:
            return self._command(*_command_of(script, key, args, text=True))

    def _waited(self, name: str, script: Any, key: str, *args: Any) -> Any:
        """Run the write (`script` on `key` and `args`, or with no script SET `key` `args`), then
        `WAIT` for the replicas, in one round trip."""
        return self._writes([(script, key, args)], name)[0]

    def _writes(self, writes: Sequence[_Write], name: str) -> list[Any]:
        """The replies of `writes`, run on one pipeline (WAIT for the replicas after them when asked)."""
        return _plan.run(self._writes_plan(writes, name), {"io": self})

    def _writes_plan(self, writes: Sequence[_Write], name: str) -> Plan[list[Any]]:
        """`_writes`, for the sync and the async backend alike (a step per pipeline: `pipeline_round`).

        Those answered NOSCRIPT did not run: they go again by their scripts' text, on a second
        pipeline (a SCRIPT FLUSH of another client can fall between two commands of a pipeline,
        so only those, never the whole pipeline again)."""
        replies, acked = _settle((yield call("io", "pipeline_round", writes, text=False)), self._replicas)
        again = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
        if again:
            redone = yield call("io", "pipeline_round", [writes[i] for i in again], text=True)
            redone, more = _settle(redone, self._replicas)
            for i, reply in zip(again, redone, strict=True):
                replies[i] = reply
            acked = min(acked, more)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        if self._replicas:
            self._check_acked(name, acked)
        return replies

    def pipeline_round(self, writes: Sequence[_Write], *, text: bool) -> list[Any]:
        """One round trip of `_writes_plan`: `writes` on a pipeline (by SHA, or by `text`), WAIT after
        them when replicas are asked for; every reply, an error as its exception (nothing raised)."""
        pipe: Any = self.client.pipeline(transaction=False)
        _queue(pipe, writes, text, self._wait if self._replicas else None)
        return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    def _check_acked(self, name: str, acked: Any) -> None:
        replicas, timeout = self._wait
        if int(acked) < replicas:
            raise BackendError(
                f"redis backend wrote {name!r} but only {acked} of {replicas} replicas acknowledged it "
                f"within {timeout} ms: it may not survive a failover"
            )

    def _read_again(self, exc: redis.exceptions.RedisError, what: str, name: str, call: Callable[[], Any]) -> Any:
        """`call` (an idempotent read) failed with `exc`: retry it after a connection error or a timeout."""
        if not isinstance(exc, _RETRIED):
            raise _ERRORS.error(exc, what, name) from exc
        for pause in _READ_RETRIES:
            time.sleep(pause)
            try:
                return call()
            except _RETRIED as again:
                exc = again
            except redis.exceptions.RedisError as other:
                raise _ERRORS.error(other, what, name) from other
        raise _ERRORS.error(exc, what, name) from exc

    def _read(self, call: Callable[[], Any], what: str, name: str) -> Any:
        try:
            return call()
        except redis.exceptions.RedisError as exc:
            return self._read_again(exc, what, name, call)

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` with a new generation (conditionally if asked)."""
        if if_match is not None:
            return self._put_matching(name, data, if_match, if_absent)
        key, value, gen = self._new_value(name, data)
        # SET replaces the value atomically, as the script did; NX writes nothing if the key exists.
        args = (key, value, "NX") if if_absent else (key, value)
        try:
            if self._replicas:
                done = self._waited(name, None, *args)
            else:
                done = self._command("SET", *args)
        except redis.exceptions.RedisError as exc:
            raise _ERRORS.error(exc, "save", name) from exc
        return self._put_token(name, done, gen, "already exists")

    def _new_value(self, name: str, data: bytes) -> tuple[str, bytes, int]:
        """(Redis key, value to SET, its fresh generation) of a save of `data` under `name`."""
        gen = secrets.randbits(62) + 1
        return self._frames + name, b"".join((_gen_text(gen), data)), gen

    def _expected(self, name: str, if_match: Token, if_absent: bool) -> bytes:
        """The stored generation a conditional save compares with (its conditions checked first)."""
        if if_absent:
            raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
        if not self._is_gen(if_match):
            raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
        return _gen_text(int(if_match.value))

    @staticmethod
    def _put_token(name: str, done: Any, gen: int, why: str) -> Token:
        if not done:
            raise TokenMismatch(f"{name!r} {why}")
        return Token(gen)

    def _put_matching(self, name: str, data: bytes, if_match: Token, if_absent: bool) -> Token:
        expected = self._expected(name, if_match, if_absent)
        key, value, gen = self._new_value(name, data)
        try:
            if self._replicas:
                done = self._waited(name, self._put_if_match, key, value, expected)
            else:
                done = self._eval(self._put_if_match, key, value, expected)
        except redis.exceptions.RedisError as exc:
            raise _ERRORS.error(exc, "save", name) from exc
        return self._put_token(name, done is not None, gen, "changed since it was read")

    def get(self, name: str) -> tuple[Data, Token] | None:
        """The frame under `name` and its generation, or None.

        A frame of 1 MiB or more comes back as a `memoryview` of the reply (no copy)."""
        key = self._frames + name
        try:
            raw = self._command("GET", key)
        except redis.exceptions.RedisError as exc:
            raw = self._read_again(exc, "load", name, functools.partial(self._command, "GET", key))
        return self._got(name, raw)

    def _got(self, name: str, raw: bytes | None) -> tuple[Data, Token] | None:
        if raw is None:
            return None
        gen = self._parse_gen(name, raw[:_GEN_DIGITS])
        data = raw[_GEN_DIGITS:] if len(raw) < _VIEW_FROM else memoryview(raw)[_GEN_DIGITS:]
        return data, Token(gen)

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        key, expected = self._delete_args(name, token)
        try:
            if self._replicas:
                deleted = self._waited(name, self._delete, key, expected)
            else:
                deleted = self._eval(self._delete, key, expected)
        except redis.exceptions.RedisError as exc:
            raise _ERRORS.error(exc, "delete", name) from exc
        self._deleted(name, token, deleted)

    def _delete_args(self, name: str, token: Token) -> tuple[str, bytes]:
        if not self._is_gen(token):
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
        return self._frames + name, _gen_text(int(token.value))

    @staticmethod
    def _deleted(name: str, token: Token, deleted: Any) -> None:
        if not deleted:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    @staticmethod
    def _is_gen(token: Token) -> bool:
        value = token.value
        return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**_GEN_DIGITS

    @staticmethod
    def _parse_gen(name: str, text: bytes) -> int:
        if len(text) != _GEN_DIGITS or not text.isdigit():
            raise FormatError(f"redis value for {name!r} is not a berth frame (no generation)")
        return int(text)

    def _batches(self, prefix: str) -> Iterator[list[str]]:
        # SCAN in batches: the server keeps no state between calls, so a slow
        # consumer holds nothing; a key present throughout is seen at least once.
        match = self._match(prefix)
        cursor: int = 0
        while True:
            cursor, keys = self._read(
                functools.partial(self.client.scan, cursor, match=match, count=_SCAN_COUNT), "list", prefix
            )
            names = self._ours(keys, prefix)
            if names:
                yield names
            if int(cursor) == 0:
                return

    def _match(self, prefix: str) -> str:
        return _GLOB.sub(r"\\\1", self._frames + prefix) + "*"

    def _ours(self, keys: Any, prefix: str) -> list[str]:
        """The SCANned `keys` that are frames under `prefix`, decoded."""
        full = self._frames + prefix
        names = []
        for raw in cast("list[bytes]", keys):
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if key.startswith(full):
                names.append(key)
        return names

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix` (in no particular order), a SCAN batch at a time."""
        skip = len(self._frames)
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
        return self._heads_of(iter(functools.partial(_pages_of, keys), []), size, prefix)

    def _heads_of(self, batches: Iterable[list[str]], size: int, prefix: str) -> Iterator[Head]:
        for keys in batches:
            replies = self._read(functools.partial(self._read_heads, keys, size), "list", prefix)
            yield from self._head_rows(keys, replies)

    def _read_heads(self, keys: list[str], size: int) -> list[Any]:
        """GETRANGE and STRLEN replies of each key, in pairs: native reads, packed by hand, two round trips at most.

        A head shorter than asked for is the whole value, so its length is known: STRLEN goes
        only to the longer ones. (A Lua script over the batch made head and length agree, but
        cost the server ~8× these reads; redis-py's pipeline cost more client CPU per command
        than the rest of a listing.)
        """
        end = size + _GEN_DIGITS - 1
        heads = self._replies(_packed(b"GETRANGE", keys, b"0", b"%d" % end), len(keys))
        longer = [i for i, head in enumerate(heads) if isinstance(head, bytes) and len(head) > end]
        lengths = dict(
            zip(longer, self._replies(_packed(b"STRLEN", [keys[i] for i in longer]), len(longer)), strict=True)
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

    def _head_rows(self, keys: list[str], replies: list[Any]) -> Iterator[Head]:
        """The heads of `keys` from their pipelined GETRANGE and STRLEN replies."""
        skip = len(self._frames)
        for key, head, length in zip(keys, replies[::2], replies[1::2], strict=True):
            name = key[skip:]
            for reply in (head, length):
                if isinstance(reply, redis.exceptions.RedisError):
                    if not str(reply).startswith("WRONGTYPE"):
                        raise _ERRORS.error(reply, "list", name) from reply
                    # not a string: something else's value under berth's prefix
                    yield name, FormatError(f"redis value for {name!r} is not a berth frame"), Token.ZERO, 0
                    break
            else:
                if not head:  # deleted since the SCAN
                    continue
                # A save between the two reads can make the length the newer frame's: the listing's size
                # is then that one's, its token still the head's (a delete by it is refused, as it must be).
                full = max(int(length), len(head))
                try:
                    token = Token(self._parse_gen(name, head[:_GEN_DIGITS]))
                except FormatError as exc:  # one bad value never stops a listing
                    yield name, exc, Token.ZERO, full
                    continue
                yield name, head[_GEN_DIGITS:], token, full - _GEN_DIGITS

    def get_many(self, names: Sequence[str]) -> list[tuple[Data, Token] | None]:
        """Every name's frame and generation (or None), in one MGET."""
        if not names:
            return []
        keys = [self._frames + name for name in names]
        raws = self._read(functools.partial(self._command, "MGET", *keys), "load", names[0])
        return [self._got(name, raw) for name, raw in zip(names, raws, strict=True)]

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Delete each name still at its token: one pipeline of compare-and-delete scripts (one round trip)."""
        writes, first = self._delete_writes(items)
        if first is None:
            return [False] * len(items)
        try:
            results = self._writes(writes, first)
        except redis.exceptions.RedisError as exc:
            raise _ERRORS.error(exc, "delete", first) from exc
        return self._deleted_many(items, results)

    def _delete_writes(self, items: Sequence[tuple[str, Token]]) -> tuple[list[_Write], str | None]:
        """A compare-and-delete per item with a token of this backend, and the first one's name (or None)."""
        writes: list[_Write] = []
        first = None
        for name, token in items:
            if self._is_gen(token):
                first = first or name
                writes.append((self._delete, self._frames + name, (_gen_text(int(token.value)),)))
        return writes, first

    def _deleted_many(self, items: Sequence[tuple[str, Token]], results: list[Any]) -> list[bool]:
        hits = iter(results)
        return [bool(next(hits)) if self._is_gen(token) else False for _, token in items]

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its token (a listing's long header)."""
        key = self._frames + name
        raw = self._read(functools.partial(self._command, "GETRANGE", key, 0, size + _GEN_DIGITS - 1), "list", name)
        return self._got_head(name, raw)

    def _got_head(self, name: str, raw: bytes | None) -> tuple[bytes, Token] | None:
        if not raw:
            return None
        return raw[_GEN_DIGITS:], Token(self._parse_gen(name, raw[:_GEN_DIGITS]))

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisBackend({self._server()}, prefix={self.prefix!r})"


# --- async: redis.asyncio, natively ------------------------------------------------------------


class AsyncRedisBackend(AsyncBackend):
    """`RedisBackend` awaited, on `redis.asyncio`: the same keys, scripts and semantics.

    Holds a `RedisBackend` (`sync`) for the options, the checks before a call and
    the reading of replies; its own client is `redis.asyncio.Redis` on a blocking
    pool of `max_connections` (default 50) where a task waits up to `pool_timeout`
    seconds (default: the socket timeout) for a connection. The server's durability
    check runs once, in a worker thread, on first use.

    The pool is berth's (`_LeanPool`, a `redis.asyncio.ConnectionPool`): taking and
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
        self.client = client
        self._timeout = call_timeout
        pool = client.connection_pool
        # On berth's own pool the hot calls go straight to a pooled connection (`_call`);
        # on any other (a client given by hand) through the client.
        self._command = self._call if isinstance(pool, _pool_class()) else client.execute_command
        self._put_if_match = client.register_script(_PUT_IF_MATCH)
        self._delete = client.register_script(_DELETE)
        self._check = check_durability

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisBackend:
        import redis.asyncio.retry

        options = dict(options)
        pool_timeout = options.pop("pool_timeout", None)
        client_url, client_options, own = _client_args(url, dict(options))
        check = own.pop("check_durability", True)
        sync = RedisBackend(redis.Redis.from_url(client_url, **client_options), check_durability=False, **own)
        client_url, client_options, _ = _client_args(url, dict(options), redis.asyncio.retry.Retry(NoBackoff(), 0))
        client_options.setdefault("max_connections", 50)
        pool = _pool_class().from_url(client_url, **client_options)
        # The socket timeout bounds each whole berth call (one timer) instead of each socket
        # operation (redis.asyncio starts a task per send for it): see AsyncRedisBackend._timed.
        call_timeout = pool.connection_kwargs.get("socket_timeout") or 10.0
        pool.connection_kwargs["socket_timeout"] = None
        pool.wait_timeout = pool_timeout if pool_timeout is not None else call_timeout
        return cls(sync, redis.asyncio.Redis.from_pool(pool), check_durability=check, call_timeout=call_timeout)

    def __repr__(self) -> str:
        return f"AsyncRedisBackend({self.sync._server()}, prefix={self.sync.prefix!r})"

    async def _checked(self) -> None:
        if self._check:
            self._check = False
            await asyncio.to_thread(self.sync._check_durability)

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
            if self.sync._replicas:
                return (await self._timed(functools.partial(self._writes, [(script, key, args)], name)))[0]
            try:
                return await self._timed(functools.partial(self._command, *_command_of(script, key, args)))
            except redis.exceptions.NoScriptError:  # the script did not run: by its text (see `_command_of`)
                return await self._timed(functools.partial(self._command, *_command_of(script, key, args, text=True)))
        except redis.exceptions.RedisError as exc:
            raise _ERRORS.error(exc, what, name) from exc

    async def _writes(self, writes: Sequence[_Write], name: str) -> list[Any]:
        """RedisBackend._writes, on redis.asyncio."""
        return await _plan.arun(self.sync._writes_plan(writes, name), {"io": self})

    async def pipeline_round(self, writes: Sequence[_Write], *, text: bool) -> list[Any]:
        """RedisBackend.pipeline_round, on redis.asyncio."""
        pipe = self.client.pipeline(transaction=False)
        _queue(pipe, writes, text, self.sync._wait if self.sync._replicas else None)
        return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    async def _read(self, call: Callable[[], Any], what: str, name: str) -> Any:
        await self._checked()
        try:
            return await self._timed(call)
        except redis.exceptions.RedisError as exc:
            if not isinstance(exc, _RETRIED):
                raise _ERRORS.error(exc, what, name) from exc
            last = exc
        for pause in _READ_RETRIES:
            await asyncio.sleep(pause)
            try:
                return await self._timed(call)
            except _RETRIED as again:
                last = again
            except redis.exceptions.RedisError as other:
                raise _ERRORS.error(other, what, name) from other
        raise _ERRORS.error(last, what, name) from last

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        sync = self.sync
        if if_match is not None:
            expected = sync._expected(name, if_match, if_absent)
            key, value, gen = sync._new_value(name, data)
            done = await self._write(name, "save", self._put_if_match, key, value, expected)
            return sync._put_token(name, done is not None, gen, "changed since it was read")
        key, value, gen = sync._new_value(name, data)
        args = (key, value, "NX") if if_absent else (key, value)
        done = await self._write(name, "save", None, *args)
        return sync._put_token(name, done, gen, "already exists")

    async def get(self, name: str) -> tuple[Data, Token] | None:
        key = self.sync._frames + name
        return self.sync._got(name, await self._read(lambda: self._command("GET", key), "load", name))

    async def delete(self, name: str, token: Token) -> None:
        key, expected = self.sync._delete_args(name, token)
        deleted = await self._write(name, "delete", self._delete, key, expected)
        self.sync._deleted(name, token, deleted)

    async def _batches(self, prefix: str) -> AsyncIterator[list[str]]:
        match = self.sync._match(prefix)
        cursor: int = 0
        while True:
            cursor, keys = await self._read(
                functools.partial(self.client.scan, cursor, match=match, count=_SCAN_COUNT), "list", prefix
            )
            names = self.sync._ours(keys, prefix)
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
                for row in self.sync._head_rows(keys, replies):
                    yield row

    async def _read_heads(self, keys: list[str], size: int) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        end = size + _GEN_DIGITS - 1
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
            if len(names) > _SCAN_COUNT:  # ordering many names is milliseconds of CPU: not on the loop
                keys = await asyncio.to_thread(sorted_names, names, limit, reverse)
            else:
                keys = sorted_names(names, limit, reverse)
            del names
            pages: Callable[[], Any] = functools.partial(_pages_of, iter(keys))
        with Ordering(reverse=reverse) as ordering:
            if limit is None:  # flat memory, as the sync listing (`ordered`)
                async for batch in self._batches(prefix):
                    if ordering.spills(len(batch)):
                        await asyncio.to_thread(ordering.add, batch)  # sorting and spilling: not on the loop
                    else:
                        ordering.add(batch)
                pages = functools.partial(_pages_of, iter(ordering))

            async def batches() -> AsyncIterator[list[str]]:
                while keys := (await asyncio.to_thread(pages) if ordering.spilled else pages()):
                    yield keys

            async for row in self._heads_of(batches(), size, prefix):
                yield row

    async def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        key = self.sync._frames + name
        raw = await self._read(lambda: self._command("GETRANGE", key, 0, size + _GEN_DIGITS - 1), "list", name)
        return self.sync._got_head(name, raw)

    async def get_many(self, names: Sequence[str]) -> list[tuple[Data, Token] | None]:
        if not names:
            return []
        keys = [self.sync._frames + name for name in names]
        raws = await self._read(lambda: self._command("MGET", *keys), "load", names[0])
        return [self.sync._got(name, raw) for name, raw in zip(names, raws, strict=True)]

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        await self._checked()
        writes, first = self.sync._delete_writes(items)
        if first is None:
            return [False] * len(items)
        try:
            results = await self._timed(functools.partial(self._writes, writes, first))
        except redis.exceptions.RedisError as exc:
            raise _ERRORS.error(exc, "delete", first) from exc
        return self.sync._deleted_many(items, results)

    async def aclose(self) -> None:
        await self.client.aclose()
        await asyncio.to_thread(self.sync.close)


_POOLS: weakref.WeakSet[Any] = weakref.WeakSet()  # every _LeanPool: each starts empty in a forked child


def _pages_of(keys: Iterator[str]) -> list[str]:
    """The next page of up to 1,000 keys (empty at the end)."""
    return list(islice(keys, _SCAN_COUNT))


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


@functools.cache
def _pool_class() -> Any:
    """`_LeanPool`, made on first use (redis.asyncio is imported only by async stores)."""
    import redis.asyncio

    class _LeanPool(redis.asyncio.ConnectionPool):
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
                elif await _has_data(conn):  # closed by the server (EOF seen) or left dirty: a fresh one
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

    return _LeanPool


async def _has_data(conn: Any) -> bool:
    can_read = getattr(conn, "can_read", None) or conn.can_read_destructive  # redis >= 8 / older
    return bool(await can_read())
