"""`redis://[user:pw@]host:port/db?prefix=berth:`: one string per frame, compare-and-swap in Lua.

Keyspace, under a deployment prefix (default `berth:`)::

    {prefix}frame:{name}   a string: the generation as 20 ASCII digits, then the frame

Every write draws a fresh random 62-bit generation, so a generation never repeats
for a name, not even after a delete and re-create, and a save is one SET (no
shared counter to write). A save is a plain `SET` (`SET ... NX` when it must
not exist yet); a save conditional on a generation, and the conditional delete,
are Lua scripts (EVALSHA) that compare the stored generation and act in one
atomic step. Listing walks the keyspace with `SCAN ... MATCH` (never
`KEYS`) and reads only each frame's first bytes (`GETRANGE`). The prefix is one
run of `A-Z a-z 0-9 . _ -` ending in `:`, so no two prefixes' keys can meet.

Redis acknowledges writes before they are on disk; unless the server runs with
an append-only file, an acknowledged save or claim can be undone by a restart.
Opening a backend checks the server's persistence settings and warns once per
server (`DurabilityWarning`) when that can happen.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from berth._errors import BackendError, BerthError, TokenMismatch
from berth._token import Token

__all__ = ["DurabilityWarning", "RedisBackend"]

log = logging.getLogger("berth")

_GEN_DIGITS = 20
_SCAN_COUNT = 1000
_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,64}:")
_GLOB = re.compile(r"([\\*?\[\]])")
_READ_RETRIES = (0.05, 0.25)  # idempotent reads retry after these pauses; writes never retry
_RETRIED = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_VIEW_FROM = 1 << 20  # `get` returns frames this large as a view of the reply instead of a copy
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
# KEYS: frames. ARGV: bytes of frame wanted. One atomic read per frame: head and length agree.
_HEADS = """
local n = tonumber(ARGV[1]) + 19
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = {redis.call('GETRANGE', k, 0, n), redis.call('STRLEN', k)}
end
return out
"""


class DurabilityWarning(UserWarning):
    """The Redis server can lose writes it acknowledged (no append-only file, or one never fsynced)."""


def _failed(what: str, name: str, exc: redis.exceptions.RedisError) -> NoReturn:
    raise BackendError(f"redis backend could not {what} {name!r}: {type(exc).__name__}: {exc}") from exc


def _caller_level() -> int:
    """The `stacklevel` that points a warning at the first caller outside berth."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "berth":
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _gen_text(value: int) -> bytes:
    return b"%020d" % value


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisBackend:
    """Frames as Redis strings under one key prefix; safe across threads, processes and hosts.

    Standalone Redis (or a Sentinel-managed primary): listing reads a batch of
    frame keys in one script, which Redis Cluster would need in one hash slot,
    so Cluster is not supported.
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
        self._heads = client.register_script(_HEADS)
        if check_durability:
            self._check_durability()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        """Open `redis://` or `rediss://` with berth's options (`prefix`, `check_durability`,
        `wait_replicas`, `wait_timeout`) from the query or keywords; the rest go to redis-py."""
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
        # No automatic retries: a write whose reply was lost may have happened,
        # and re-running a claim could turn a win into a reported loss.
        options["retry"] = Retry(NoBackoff(), 0)
        options["decode_responses"] = False
        client = redis.Redis.from_url(urlunsplit(parts._replace(query="&".join(kept))), **options)
        return cls(client, **own)

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
                stacklevel=_caller_level(),
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
        except redis.exceptions.NoScriptError:  # the script never ran: loading it and running it again is safe
            script.sha = self.client.script_load(script.script)
            return self._command("EVALSHA", script.sha, 1, key, *args)

    def _waited(self, queue: Callable[[Any], object], name: str) -> Any:
        """Run the write `queue` puts on a pipeline, then `WAIT` for the replicas, in one round trip."""
        replicas, timeout = self._wait
        pipe = self.client.pipeline(transaction=False)
        queue(pipe)
        pipe.wait(replicas, timeout)
        result, acked = pipe.execute()
        if int(acked) < replicas:
            raise BackendError(
                f"redis backend wrote {name!r} but only {acked} of {replicas} replicas acknowledged it "
                f"within {timeout} ms: it may not survive a failover"
            )
        return result

    def _read_again(self, exc: redis.exceptions.RedisError, what: str, name: str, call: Callable[[], Any]) -> Any:
        """`call` (an idempotent read) failed with `exc`: retry it after a connection error or a timeout."""
        if not isinstance(exc, _RETRIED):
            _failed(what, name, exc)
        for pause in _READ_RETRIES:
            time.sleep(pause)
            try:
                return call()
            except _RETRIED as again:
                exc = again
            except redis.exceptions.RedisError as other:
                _failed(what, name, other)
        _failed(what, name, exc)

    def _read(self, call: Callable[[], Any], what: str, name: str) -> Any:
        try:
            return call()
        except redis.exceptions.RedisError as exc:
            return self._read_again(exc, what, name, call)

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` with a new generation (conditionally if asked)."""
        if if_match is not None:
            return self._put_matching(name, data, if_match, if_absent)
        gen = secrets.randbits(62) + 1
        key = self._frames + name
        value = b"".join((_gen_text(gen), data))
        # SET replaces the value atomically, as the script did; NX writes nothing if the key exists.
        args = (key, value, "NX") if if_absent else (key, value)
        try:
            if self._replicas:
                done = self._waited(lambda pipe: pipe.execute_command("SET", *args), name)
            else:
                done = self._command("SET", *args)
        except redis.exceptions.RedisError as exc:
            _failed("save", name, exc)
        if not done:
            raise TokenMismatch(f"{name!r} already exists")
        return Token(gen)

    def _put_matching(self, name: str, data: bytes, if_match: Token, if_absent: bool) -> Token:
        if if_absent:
            raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
        if not self._is_gen(if_match):
            raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
        expected = _gen_text(int(if_match.value))
        gen = secrets.randbits(62) + 1
        key = self._frames + name
        value = b"".join((_gen_text(gen), data))
        try:
            if self._replicas:
                done = self._waited(
                    lambda pipe: self._put_if_match(keys=[key], args=[value, expected], client=pipe), name
                )
            else:
                done = self._eval(self._put_if_match, key, value, expected)
        except redis.exceptions.RedisError as exc:
            _failed("save", name, exc)
        if done is None:
            raise TokenMismatch(f"{name!r} changed since it was read")
        return Token(gen)

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its generation, or None.

        A frame of 1 MiB or more comes back as a `memoryview` of the reply (no copy)."""
        key = self._frames + name
        try:
            raw = self._command("GET", key)
        except redis.exceptions.RedisError as exc:
            raw = self._read_again(exc, "load", name, functools.partial(self._command, "GET", key))
        if raw is None:
            return None
        gen = self._parse_gen(name, raw[:_GEN_DIGITS])
        data = raw[_GEN_DIGITS:] if len(raw) < _VIEW_FROM else memoryview(raw)[_GEN_DIGITS:]
        return data, Token(gen)  # type: ignore[return-value]

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        if not self._is_gen(token):
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
        key = self._frames + name
        expected = _gen_text(int(token.value))
        try:
            if self._replicas:
                deleted = self._waited(lambda pipe: self._delete(keys=[key], args=[expected], client=pipe), name)
            else:
                deleted = self._eval(self._delete, key, expected)
        except redis.exceptions.RedisError as exc:
            _failed("delete", name, exc)
        if not deleted:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    @staticmethod
    def _is_gen(token: Token) -> bool:
        value = token.value
        return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**_GEN_DIGITS

    @staticmethod
    def _parse_gen(name: str, text: bytes) -> int:
        if len(text) != _GEN_DIGITS or not text.isdigit():
            raise BackendError(f"redis value for {name!r} is not a berth frame (no generation)")
        return int(text)

    def _batches(self, prefix: str) -> Iterator[list[str]]:
        # SCAN in batches: the server keeps no state between calls, so a slow
        # consumer holds nothing; a key present throughout is seen at least once.
        match = _GLOB.sub(r"\\\1", self._frames + prefix) + "*"
        full = self._frames + prefix
        cursor: int = 0
        while True:
            cursor, keys = self._read(
                functools.partial(self.client.scan, cursor, match=match, count=_SCAN_COUNT), "list", prefix
            )
            names = []
            for raw in cast("list[bytes]", keys):
                try:
                    key = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if key.startswith(full):
                    names.append(key)
            if names:
                yield names
            if int(cursor) == 0:
                return

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix` (in no particular order), a SCAN batch at a time."""
        skip = len(self._frames)
        for keys in self._batches(prefix):
            for key in keys:
                yield key[skip:]

    def heads(self, prefix: str, size: int) -> Iterator[tuple[str, bytes, Token, int]]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`."""
        skip = len(self._frames)
        for keys in self._batches(prefix):
            rows = self._read(functools.partial(self._heads, keys=keys, args=[size]), "list", prefix)
            for key, (head, length) in zip(keys, rows, strict=True):
                if not head:  # deleted since the SCAN
                    continue
                name = key[skip:]
                yield (
                    name,
                    head[_GEN_DIGITS:],
                    Token(self._parse_gen(name, head[:_GEN_DIGITS])),
                    int(length) - _GEN_DIGITS,
                )

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisBackend({self._server()}, prefix={self.prefix!r})"
