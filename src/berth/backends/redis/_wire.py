"""What the sync and the async Redis backends share, no I/O: the keyspace, the Lua scripts, the error table.

`Keyspace` turns names into keys and replies into frames and tokens; the write commands
(`command_of`, `queue`, `settle`) and the plan of a pipelined write (`Keyspace.writes_plan`)
are the same for redis-py and redis.asyncio.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from berth._errors import BackendError, BerthError, FormatError, TokenMismatch
from berth._plan import Plan, role, step
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends._bulk import Data, Head, Put
from berth.backends._errmap import ErrorMap, Row
from berth.backends._url import own_options

__all__ = [
    "DELETE",
    "ERRORS",
    "GEN_DIGITS",
    "PUT_IF_MATCH",
    "READ_RETRIES",
    "RETRIED",
    "SCAN_COUNT",
    "Keyspace",
    "Pipelines",
    "Write",
    "client_args",
    "command_of",
    "packed",
    "queue",
]

GEN_DIGITS = 20
SCAN_COUNT = 1000
READ_RETRIES = (0.05, 0.25)  # idempotent reads retry after these pauses; writes never retry
RETRIED = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,64}:")
_GLOB = re.compile(r"([\\*?\[\]])")
_READ_SIZE = 1 << 17  # bytes a connection reads at a time (its buffer): a 64 KiB frame's reply in one read
_VIEW_FROM = LARGE_FRAME  # `get` returns frames this large as a view of the reply instead of a copy
_URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "prefix": str,
    "check_durability": lambda v: v.lower() in ("1", "true", "yes", "on"),
    "wait_replicas": int,
    "wait_timeout": int,
}

# KEYS: frame. ARGV: generation (20 digits) + data, expected generation (20 digits).
# Only a save conditional on a generation runs it: a plain save is `SET`, `if_absent` is `SET NX`.
PUT_IF_MATCH = """
if redis.call('GETRANGE', KEYS[1], 0, 19) ~= ARGV[2] then return false end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
# KEYS: frame. ARGV: expected generation (20 digits).
DELETE = """
if redis.call('GETRANGE', KEYS[1], 0, 19) == ARGV[1] then
  redis.call('UNLINK', KEYS[1])
  return 1
end
return 0
"""

ERRORS = ErrorMap(
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
"""The Redis backends' one table of client errors (`berth/backends/_errmap.py`)."""


def packed(command: bytes, keys: list[str], *args: bytes) -> bytes:
    """`command key *args` for each key, packed as one RESP request (one write, one round trip)."""
    before = b"*%d\r\n$%d\r\n%s\r\n" % (2 + len(args), len(command), command)
    after = b"".join(b"\r\n$%d\r\n%s" % (len(a), a) for a in args) + b"\r\n"
    parts = []
    for key in keys:
        k = key.encode()
        parts.append(b"%s$%d\r\n%s%s" % (before, len(k), k, after))
    return b"".join(parts)


def command_of(script: Any, key: str, args: tuple[Any, ...], *, text: bool = False) -> tuple[Any, ...]:
    """The command of a write: `script` (a registered Script) on `key` and `args` by its SHA, or
    with `text` by its source; with no script, SET `key` `args`.

    A NOSCRIPT answer to the SHA means the script did not run (a restart, a failover or a SCRIPT
    FLUSH emptied the server's cache), so the write is sent again by its source: EVAL runs it and
    caches it, and no SCRIPT LOAD in between can be raced by another flush."""
    if script is None:
        return ("SET", key, *args)
    return ("EVAL", script.script, 1, key, *args) if text else ("EVALSHA", script.sha, 1, key, *args)


Write = tuple[Any, str, tuple[Any, ...]]
"""A write on a pipeline: (registered Script, or None for SET; key; arguments)."""


@role
class Pipelines(Protocol):
    """The role of `Keyspace.writes_plan`'s steps: a backend that sends writes on a pipeline."""

    def pipeline_round(self, writes: Sequence[Write], *, text: bool) -> list[Any]:
        """One round trip: `writes` on a pipeline (by SHA, or by `text`), WAIT after them when replicas
        are asked for; every reply, an error as its exception (nothing raised)."""
        ...


def queue(pipe: Any, writes: Sequence[Write], text: bool, wait: tuple[int, int] | None) -> None:
    """Put `writes` on `pipe` (by SHA, or by `text`), and WAIT for `wait`'s replicas after them."""
    # Each command goes on the pipeline as it is: a Script on a pipeline would add a round trip
    # of SCRIPT EXISTS to every execute (and a SCRIPT FLUSH can still fall after it).
    for script, key, args in writes:
        pipe.execute_command(*command_of(script, key, args, text=text))
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


def client_args(url: str, options: dict[str, Any], retry: Any = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(URL for redis-py, options for redis-py, berth's own options) of a `redis://` URL and keywords."""
    client_url = own_options(url, _URL_OPTIONS, options, "redis")
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
    return client_url, options, own


class Keyspace:
    """One deployment prefix's keys, and what a backend sends and reads there, without I/O.

    Held by `RedisBackend` and `AsyncRedisBackend` alike: the checks before a call, the
    values a save writes, the reading of replies into frames, tokens and heads.
    """

    __slots__ = ("frames", "prefix", "replicas", "wait")

    def __init__(self, prefix: str, wait_replicas: int, wait_timeout: int):
        if isinstance(prefix, str) and prefix and not prefix.endswith(":"):
            prefix += ":"
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise BerthError(f"redis prefix {prefix!r} must be 1-64 of A-Z a-z 0-9 . _ - followed by ':'")
        if wait_replicas < 0 or wait_timeout < 0:
            raise BerthError("redis wait_replicas and wait_timeout must not be negative")
        self.prefix = prefix
        self.frames = prefix + "frame:"
        """The prefix of every frame's key: `{prefix}frame:{name}`."""
        self.wait = (wait_replicas, wait_timeout)
        self.replicas = wait_replicas

    # --- writes -------------------------------------------------------------------------

    def new_value(self, name: str, data: bytes) -> tuple[str, bytes, int]:
        """(Redis key, value to SET, its fresh generation) of a save of `data` under `name`."""
        gen = secrets.randbits(62) + 1
        return self.frames + name, b"".join((_gen_text(gen), data)), gen

    def expected(self, name: str, if_match: Token, if_absent: bool) -> bytes:
        """The stored generation a conditional save compares with (its conditions checked first)."""
        if if_absent:
            raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
        if not self.is_gen(if_match):
            raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
        return _gen_text(int(if_match.value))

    @staticmethod
    def put_token(name: str, done: Any, gen: int, why: str) -> Token:
        """The token of a save that `done` says happened; else `TokenMismatch` saying `why`."""
        if not done:
            raise TokenMismatch(f"{name!r} {why}")
        return Token(gen)

    def put_writes(self, items: Sequence[Put], script: Any) -> tuple[list[Write], list[int | TokenMismatch]]:
        """A write per item (SET, SET NX, or `script`, the compare-and-set) and each item's new generation,
        or the `TokenMismatch` of a condition no value can meet (no write for that item)."""
        writes: list[Write] = []
        gens: list[int | TokenMismatch] = []
        for name, data, if_match, if_absent in items:
            if if_match is not None:
                try:
                    expected = self.expected(name, if_match, if_absent)
                except TokenMismatch as exc:
                    gens.append(exc)
                    continue
            key, value, gen = self.new_value(name, data)
            if if_match is not None:
                writes.append((script, key, (value, expected)))
            else:
                writes.append((None, key, (value, "NX") if if_absent else (value,)))
            gens.append(gen)
        return writes, gens

    def put_outcomes(
        self, items: Sequence[Put], gens: Sequence[int | TokenMismatch], replies: Sequence[Any]
    ) -> list[Token | TokenMismatch]:
        """Each item's token or `TokenMismatch`, from `put_writes`' generations and its writes' replies."""
        done = iter(replies)
        out: list[Token | TokenMismatch] = []
        for item, gen in zip(items, gens, strict=True):
            if isinstance(gen, TokenMismatch):
                out.append(gen)
            elif next(done):
                out.append(Token(gen))
            else:
                why = "already exists" if item.if_absent else "changed since it was read"
                out.append(TokenMismatch(f"{item.name!r} {why}"))
        return out

    def delete_args(self, name: str, token: Token) -> tuple[str, bytes]:
        """(key, expected generation) of a delete by `token` (`TokenMismatch` for a token not of Redis)."""
        if not self.is_gen(token):
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
        return self.frames + name, _gen_text(int(token.value))

    @staticmethod
    def deleted(name: str, token: Token, deleted: Any) -> None:
        """`TokenMismatch` unless the compare-and-delete script answered that it deleted."""
        if not deleted:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    def delete_writes(self, items: Sequence[tuple[str, Token]], script: Any) -> tuple[list[Write], str | None]:
        """A compare-and-delete (`script`) per item with a token of this backend, and the first one's name (or None)."""
        writes: list[Write] = []
        first = None
        for name, token in items:
            if self.is_gen(token):
                first = first or name
                writes.append((script, self.frames + name, (_gen_text(int(token.value)),)))
        return writes, first

    def deleted_many(self, items: Sequence[tuple[str, Token]], results: list[Any]) -> list[bool]:
        """Whether each item was deleted, from the replies of `delete_writes`' writes."""
        hits = iter(results)
        return [bool(next(hits)) if self.is_gen(token) else False for _, token in items]

    def writes_plan(self, writes: Sequence[Write], name: str) -> Plan[list[Any]]:
        """The replies of `writes` on one pipeline (WAIT for the replicas after them when asked), for
        the sync and the async backend alike (a step per pipeline: `Pipelines.pipeline_round`).

        Those answered NOSCRIPT did not run: they go again by their scripts' text, on a second
        pipeline (a SCRIPT FLUSH of another client can fall between two commands of a pipeline,
        so only those, never the whole pipeline again)."""
        replies, acked = _settle((yield from step(Pipelines.pipeline_round, writes, text=False)), self.replicas)
        again = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
        if again:
            redone = yield from step(Pipelines.pipeline_round, [writes[i] for i in again], text=True)
            redone, more = _settle(redone, self.replicas)
            for i, reply in zip(again, redone, strict=True):
                replies[i] = reply
            acked = min(acked, more)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        if self.replicas:
            self._check_acked(name, acked)
        return replies

    def _check_acked(self, name: str, acked: Any) -> None:
        replicas, timeout = self.wait
        if int(acked) < replicas:
            raise BackendError(
                f"redis backend wrote {name!r} but only {acked} of {replicas} replicas acknowledged it "
                f"within {timeout} ms: it may not survive a failover"
            )

    # --- reads --------------------------------------------------------------------------

    @staticmethod
    def is_gen(token: Token) -> bool:
        """Whether `token` can be a Redis generation (a positive int of at most 20 digits)."""
        value = token.value
        return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**GEN_DIGITS

    @staticmethod
    def parse_gen(name: str, text: bytes) -> int:
        """The generation a value starts with (`FormatError`: not a berth frame)."""
        if len(text) != GEN_DIGITS or not text.isdigit():
            raise FormatError(f"redis value for {name!r} is not a berth frame (no generation)")
        return int(text)

    def got(self, name: str, raw: bytes | None) -> tuple[Data, Token] | None:
        """The frame and token of a GET's reply (a frame of 1 MiB or more as a view: no copy)."""
        if raw is None:
            return None
        gen = self.parse_gen(name, raw[:GEN_DIGITS])
        data = raw[GEN_DIGITS:] if len(raw) < _VIEW_FROM else memoryview(raw)[GEN_DIGITS:]
        return data, Token(gen)

    def got_head(self, name: str, raw: bytes | None) -> tuple[bytes, Token] | None:
        """The head and token of a GETRANGE's reply."""
        if not raw:
            return None
        return raw[GEN_DIGITS:], Token(self.parse_gen(name, raw[:GEN_DIGITS]))

    def match(self, prefix: str) -> str:
        """The SCAN pattern of the frames under `prefix`."""
        return _GLOB.sub(r"\\\1", self.frames + prefix) + "*"

    def ours(self, keys: Any, prefix: str) -> list[str]:
        """The SCANned `keys` that are frames under `prefix`, decoded."""
        full = self.frames + prefix
        names = []
        for raw in cast("list[bytes]", keys):
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if key.startswith(full):
                names.append(key)
        return names

    def head_rows(self, keys: list[str], replies: list[Any]) -> Iterator[Head]:
        """The heads of `keys` from their pipelined GETRANGE and STRLEN replies."""
        skip = len(self.frames)
        for key, head, length in zip(keys, replies[::2], replies[1::2], strict=True):
            name = key[skip:]
            for reply in (head, length):
                if isinstance(reply, redis.exceptions.RedisError):
                    error = ERRORS.error(reply, "list", name)
                    if not isinstance(error, FormatError):
                        raise error from reply
                    # not a string: something else's value under berth's prefix (one bad value
                    # never stops a listing)
                    yield name, error, Token.ZERO, 0
                    break
            else:
                if not head:  # deleted since the SCAN
                    continue
                # A save between the two reads can make the length the newer frame's: the listing's size
                # is then that one's, its token still the head's (a delete by it is refused, as it must be).
                full = max(int(length), len(head))
                try:
                    token = Token(self.parse_gen(name, head[:GEN_DIGITS]))
                except FormatError as exc:  # one bad value never stops a listing
                    yield name, exc, Token.ZERO, full
                    continue
                yield name, head[GEN_DIGITS:], token, full - GEN_DIGITS
