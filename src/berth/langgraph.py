"""LangGraph checkpoint savers whose checkpoints are sealed berth frames (extra `langgraph`).

    store = berth.open_store("sqlite:////var/lib/app/berth.db", identity="support-bot", sealer=sealer)
    graph = builder.compile(checkpointer=berth.langgraph.BerthSaver(store))
    ...
    astore = berth.aio.open_store(url, identity="support-bot", sealer=sealer)
    graph = builder.compile(checkpointer=berth.langgraph.AsyncBerthSaver(astore))

Every checkpoint and every task's pending writes is one berth frame, sealed by
the store's sealer and bound (as the seal's associated data) to the store's
identity and its key, which names the thread, the namespace and the checkpoint
id; the sealed body names them again, and a load checks both. So a planted
frame, a frame moved to another thread and a flipped byte are refused
(`berth.IntegrityError` or `berth.FormatError`), never decoded.

Keys, under `prefix` (default ``langgraph/``)::

    <thread>/<ns>/c/<checkpoint id>               the checkpoint and its metadata
    <thread>/<ns>/c/<checkpoint id>/<task id>     one task's pending writes

Each part is escaped into one key segment (`~XX` per UTF-8 byte outside
``A-Z a-z 0-9 - _ : @ + = ,``; the empty string is ``~``), and a part whose
escaped form passes 180 bytes is named by its SHA-256 (``~h<hex>``) -- never cut:
the full value rides in the sealed body and is compared on every load.
LangGraph's checkpoint ids are UUIDv6 strings, time-ordered and made of safe
characters, so key order is time order. A checkpoint's writes sort right after it,
so one newest-first ordered load of ``c/`` (`Store.load_prefix(..., limit=n, reverse=True)`)
meets each checkpoint's writes just before the checkpoint itself: the latest checkpoint
with its writes, or a page of history with theirs, is one bounded read of whole frames.

Interrupts resumed exactly once: `resume_once` / `aresume_once` (below).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import msgspec
import orjson

from berth._aio_store import AsyncStore
from berth._envelope import Envelope
from berth._errors import Expired, IntegrityError, TokenMismatch, where
from berth._hitl import human_response, interrupt_question, parse_approval
from berth._plan import InThreads, Plan, arun, call, commit, run, settle
from berth._store import Listing, Parked, Store
from berth._token import Token
from berth.backends._aio import ThreadedBackend

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.types import INTERRUPT
    from langgraph.types import StateSnapshot
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.langgraph needs langgraph: pip install 'berthing[langgraph]'") from exc

__all__ = [
    "DEFAULT_DEADLINE",
    "PROVIDER",
    "AsyncBerthSaver",
    "BerthSaver",
    "aresume_once",
    "human_response",
    "parse_approval",
    "resume_once",
]

log = logging.getLogger("berth")

DEFAULT_DEADLINE = timedelta(days=14)
"""How long an interrupt waits for its resume unless `resume_once` is told otherwise."""

PROVIDER = "langgraph"
"""The envelope's `provider` for frames written by these savers."""

T = TypeVar("T")

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:@+=,")
_SEGMENT_MAX = 180
_PAGE = 100  # checkpoints loaded per batch while listing
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")  # LangGraph's interrupt ids: xxh3-128 hex digests
_LEASE = timedelta(minutes=15)  # how long one resume may hold a checkpoint before a waiter takes it over
_LEASE_POLL = (0.005, 0.25)  # first and longest pause between looks at a held lease, in seconds


@functools.lru_cache(maxsize=4096)  # a thread's and a checkpoint's segments come up on every call
def _segment(value: str) -> str:
    """`value` as one valid, injective key segment (see the module's docstring)."""
    if not value:
        return "~"
    if all(ch in _SAFE for ch in value):
        out = value
    else:
        raw = value.encode("utf-8", "surrogatepass")
        out = "".join(chr(b) if chr(b) in _SAFE else f"~{b:02X}" for b in raw)
    if len(out) > _SEGMENT_MAX:
        return "~h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return out


class _CheckpointBody(msgspec.Struct):
    """A checkpoint frame's sealed body: where it belongs, then the serializer's bytes (base64 in the JSON).

    Typed, so msgspec decodes the base64 itself (binascii's was ~3.5 ns a byte: ~9 us of a
    2 KiB chat checkpoint, a third of LangGraph's whole get_tuple) and refuses any other shape.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes


class _WritesBody(msgspec.Struct):
    """One task's pending writes of a checkpoint: `(idx, channel, type, bytes)` each, ordered by idx."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[tuple[int, str, str, bytes]]


_encode_body = msgspec.json.Encoder().encode
_checkpoint_body = msgspec.json.Decoder(_CheckpointBody)
_writes_body = msgspec.json.Decoder(_WritesBody)
_any_body = msgspec.json.Decoder(dict[str, Any])
_Body = TypeVar("_Body")
_Loaded = tuple[str, Parked | None, list[tuple[str, Parked | None]]]
"""A checkpoint's key and frame as loaded (None: gone meanwhile), with its writes' keys and frames."""


def _names(body: Any, want: dict[str, str]) -> bool:
    """Whether a decoded body (a typed struct, or a dict) holds each of `want`'s fields with its value."""
    if type(body) is dict:
        return all(body.get(name) == value for name, value in want.items())
    for name, value in want.items():  # a loop, not all(): this runs for every frame a read opens
        if getattr(body, name, None) != value:
            return False
    return True


class _Parts:
    """A frame's key, split: thread, namespace and kind segments, then the checkpoint id's (and task's).

    A checkpoint is kind ``c`` with no task; its pending writes are kind ``c`` with one.
    """

    __slots__ = ("cid", "kind", "ns", "task", "thread")

    def __init__(self, rest: str):
        parts = rest.split("/")
        self.thread, self.ns, self.kind = (parts + ["", "", ""])[:3]
        self.cid = parts[3] if len(parts) > 3 else ""
        self.task = parts[4] if len(parts) > 4 else ""


def _questions_over(store: Store) -> Any:
    from berth._questions import QuestionStore

    return QuestionStore(store.backend, identity=store.identity, sealer=store.sealer, clock=store.now)


def _ask_once(questions: Any, key: str, value: Any, deadline: datetime, question_id: str) -> None:
    """Ask, unless this very interrupt is already asked: one raised again (its branch re-run) keeps its answer.

    An interrupt's value in the Agent Inbox convention (a `HumanInterrupt`) is asked as a structured
    tool approval (`berth._hitl.interrupt_question`); any other value asks for free text.
    """
    asked = questions.pending(key)
    if asked is None or asked.id != question_id:
        prompt, accepts, tool = interrupt_question(getattr(value, "value", value))
        questions.ask(key, prompt, deadline=deadline, question_id=question_id, accepts=accepts, tool=tool)


def _asked(questions: Any, prefix: str, limit: int) -> list[str]:
    """The keys of up to `limit` open questions under `prefix`."""
    return [question.key for question, _ in itertools.islice(questions.list(prefix), limit)]


def _refuse_unseen(store: Store, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
    """With a witness: raise `IntegrityError` for a frame under `prefix`, sorting after `after` (and before
    `before`), that a read did not find and the witness saw parked and never leave (deleted behind berth's back).

    Each key the witness knows there that the read did not see is loaded: one that left (a
    claim, a delete, a sweep) or landed meanwhile passes; a missing one is refused by the load.
    """
    for key in store.frames.keys_after(prefix, after):  # none without a witness
        if key not in seen and (before is None or key < before):
            store.load(key, allow_expired=True)


class _SyncIO:
    """The store calls a saver's plans make, over a `berth.Store`."""

    def __init__(self, store: Store):
        self.store = store
        self.questions = _questions_over(store)

    def ask(self, key: str, value: Any, deadline: datetime, question_id: str) -> None:
        _ask_once(self.questions, key, value, deadline, question_id)

    def consume(self, key: str, question_id: str) -> None:
        self.questions.consume(key, question_id)

    def asked(self, prefix: str, limit: int) -> list[str]:
        return _asked(self.questions, prefix, limit)

    def exists(self, key: str) -> bool:
        return self.store.load(key, allow_expired=True) is not None

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def clear_expired(self, key: str) -> None:
        try:
            self.store.load(key)
        except Expired as exc:
            self.delete(key, exc.token)

    def heads(self, prefix: str, limit: int | None = None, reverse: bool = False) -> list[Listing]:
        return list(self.store.list(prefix, limit=limit, reverse=reverse))

    def unseen(self, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
        _refuse_unseen(self.store, prefix, after, seen, before)

    def load(self, key: str) -> Parked | None:
        return self.store.load(key)

    def load_many(self, keys: Sequence[str]) -> list[Parked | None]:
        return self.store.load_many(keys) if keys else []

    def frames(
        self, prefix: str, limit: int | None = None, reverse: bool = False, before: str | None = None
    ) -> list[tuple[str, Parked]]:
        return list(self.store.load_prefix(prefix, limit=limit, reverse=reverse, before=before))

    def last_key(self, prefix: str, before: str | None) -> str | None:
        found = self.store.load_prefix(prefix, limit=1, reverse=True, before=before, allow_expired=True)
        return next((key for key, _ in found), None)

    def save(self, key: str, envelope: Envelope, **condition: Any) -> Any:
        return self.store.save(key, envelope, **condition)

    def delete(self, key: str, token: Any) -> None:
        try:
            self.store.delete(key, token)
        except TokenMismatch:  # re-saved or removed meanwhile: what is there now stays
            pass

    def delete_prefix(self, prefix: str) -> int:
        return self.store.delete_prefix(prefix)


class _AsyncIO:
    """The same calls, awaited, over a `berth.aio.AsyncStore`."""

    def __init__(self, store: AsyncStore):
        self.store = store
        self.questions = _questions_over(store.sync)

    async def ask(self, key: str, value: Any, deadline: datetime, question_id: str) -> None:
        await asyncio.to_thread(_ask_once, self.questions, key, value, deadline, question_id)

    async def consume(self, key: str, question_id: str) -> None:
        await asyncio.to_thread(self.questions.consume, key, question_id)

    async def asked(self, prefix: str, limit: int) -> list[str]:
        return await asyncio.to_thread(_asked, self.questions, prefix, limit)

    async def exists(self, key: str) -> bool:
        return await self.store.load(key, allow_expired=True) is not None

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def clear_expired(self, key: str) -> None:
        try:
            await self.store.load(key)
        except Expired as exc:
            await self.delete(key, exc.token)

    async def heads(self, prefix: str, limit: int | None = None, reverse: bool = False) -> list[Listing]:
        return [item async for item in self.store.list(prefix, limit=limit, reverse=reverse)]

    async def unseen(self, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
        if self.store.frames.records is not None:  # a witness's backend: the unseen keys to check
            await asyncio.to_thread(_refuse_unseen, self.store.sync, prefix, after, seen, before)

    async def load(self, key: str) -> Parked | None:
        return await self.store.load(key)

    async def load_many(self, keys: Sequence[str]) -> list[Parked | None]:
        return await self.store.load_many(keys) if keys else []

    async def frames(
        self, prefix: str, limit: int | None = None, reverse: bool = False, before: str | None = None
    ) -> list[tuple[str, Parked]]:
        return [row async for row in self.store.load_prefix(prefix, limit=limit, reverse=reverse, before=before)]

    async def last_key(self, prefix: str, before: str | None) -> str | None:
        found = self.store.load_prefix(prefix, limit=1, reverse=True, before=before, allow_expired=True)
        return next(iter([key async for key, _ in found]), None)

    async def save(self, key: str, envelope: Envelope, **condition: Any) -> Any:
        return await self.store.save(key, envelope, **condition)

    async def delete(self, key: str, token: Any) -> None:
        try:
            await self.store.delete(key, token)
        except TokenMismatch:
            pass

    async def delete_prefix(self, prefix: str) -> int:
        return await self.store.delete_prefix(prefix)


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    return dict(config.get("configurable") or {})


def _thread_of(config: RunnableConfig) -> str:
    value = _configurable(config).get("thread_id")
    if value is None:
        raise ValueError("a LangGraph config for a berth saver needs configurable.thread_id")
    return str(value)


def _config(thread: str, ns: str, cid: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}


def _is_resume_map(value: Any) -> bool:
    """LangGraph's own test: a non-empty dict keyed by interrupt ids resumes each interrupt it names."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and _INTERRUPT_ID.fullmatch(k) for k in value)
    )


class _Claim:
    """What one resumer has won so far, recorded step by step, so that what it took can be handed back.

    `resume` maps each interrupt id won to its answer, `tokens` to its claim record's token,
    `prompts` to the interrupt's value (its question, asked again if handed back); `lease_token`
    is the checkpoint's run lease once held. A failed claim hands back exactly these (`_unclaim`);
    a cancelled one, its commits' undos (`berth._plan.commit`).
    """

    __slots__ = ("due", "lease_key", "lease_token", "prompts", "resume", "tokens", "where")

    def __init__(self) -> None:
        self.resume: dict[str, Any] = {}
        self.tokens: dict[str, Token] = {}
        self.prompts: dict[str, Any] = {}  # each interrupt's value, asked again if the resume is handed back
        self.where: tuple[str, str, str] = ("", "", "")
        self.due: datetime | None = None
        self.lease_key = ""
        self.lease_token: Token | None = None


class _SaverCore(BaseCheckpointSaver[Any]):
    """The savers' logic, once: every operation is a plan (`berth._plan`) over the role "io"."""

    _sync_io: Any
    default_deadline: timedelta = DEFAULT_DEADLINE
    now: Callable[[], datetime]
    _async_run: Callable[[Plan[Any]], Any]
    _async_targets: Callable[[], dict[str, Any]]
    """The "io" role awaited one step at a time (`aresume_once`'s claim, which a cancellation stops between steps)."""

    def __init__(self, *, identity: str, prefix: str, serde: SerializerProtocol | None):
        super().__init__(serde=serde)
        if not isinstance(prefix, str) or (prefix and not prefix.endswith("/")) or len(prefix) > 128:
            raise ValueError(f"prefix must be '' or a str ending in '/' of at most 128 characters, got {prefix!r}")
        self.identity = identity
        self.prefix = prefix

    # -- keys ---------------------------------------------------------------------------------

    def _thread_prefix(self, thread: str) -> str:
        return f"{self.prefix}{_segment(thread)}/"

    def _ns_prefix(self, thread: str, ns: str) -> str:
        return f"{self._thread_prefix(thread)}{_segment(ns)}/"

    def _checkpoint_key(self, thread: str, ns: str, cid: str) -> str:
        return f"{self._ns_prefix(thread, ns)}c/{_segment(cid)}"

    def _writes_prefix(self, thread: str, ns: str, cid: str) -> str:
        return f"{self._checkpoint_key(thread, ns, cid)}/"

    def _parts(self, key: str) -> _Parts:
        return _Parts(key[len(self.prefix) :])

    def _is_checkpoint(self, key: str) -> bool:
        parts = self._parts(key)
        return parts.kind == "c" and not parts.task

    # -- frames -------------------------------------------------------------------------------

    def _bound(self, key: str, parked: Parked, want: dict[str, str], decoder: msgspec.json.Decoder[_Body]) -> _Body:
        """The sealed body at `key` as `decoder` reads it, after checking it names what the key does."""
        env = parked.envelope
        body: _Body | None = None
        if env.provider == PROVIDER:
            try:
                body = decoder.decode(env.provider_state)
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        if body is None or not _names(body, want):
            raise IntegrityError(
                f"frame at {where(self.identity, key)} is not the LangGraph "
                f"{'pending writes' if decoder is _writes_body else 'checkpoint'} its key names: refused",
                identity=self.identity,
                key=key,
            )
        return body

    def _checkpoint_envelope(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[str, Envelope, RunnableConfig]:
        conf = _configurable(config)
        thread = _thread_of(config)
        ns = str(conf.get("checkpoint_ns") or "")
        cid = str(checkpoint["id"])
        ctype, cdata = self.serde.dumps_typed(checkpoint)
        merged = get_checkpoint_metadata(config, metadata)
        mtype, mdata = self.serde.dumps_typed(merged)
        run_id = merged.get("run_id")
        parent = conf.get("checkpoint_id")
        body = _CheckpointBody(thread, ns, cid, None if parent is None else str(parent), ctype, cdata, mtype, mdata)
        env = Envelope(
            provider=PROVIDER,
            provider_state=_encode_body(body),
            run_id=run_id if isinstance(run_id, str) else "",
            reason="checkpoint",
        )
        return self._checkpoint_key(thread, ns, cid), env, _config(thread, ns, cid)

    def _tuple(self, body: _CheckpointBody, metadata: Any, writes: list[tuple[str, str, Any]]) -> CheckpointTuple:
        thread, ns, cid = body.thread_id, body.checkpoint_ns, body.checkpoint_id
        parent = body.parent_checkpoint_id
        return CheckpointTuple(
            config=_config(thread, ns, cid),
            checkpoint=self.serde.loads_typed((body.type, body.checkpoint)),
            metadata=metadata,
            parent_config=_config(thread, ns, parent) if parent else None,
            pending_writes=writes,
        )

    # -- plans --------------------------------------------------------------------------------

    def _newest(self, prefix: str, count: int, before: str | None = None) -> Plan[list[_Loaded]]:
        """The newest `count` checkpoints under one namespace's `c/` (keys before `before`), with their writes.

        A checkpoint's writes (`c/<id>/<task>`) sort after it, so newest first they come just
        before it: one ordered load of two frames per checkpoint (it and one task's writes) to
        start with, more only while it has not reached the `count`-th checkpoint. With `before`
        it starts there: one bounded query however long the history behind it.
        """
        size = 2 * count
        while True:
            rows = yield call("io", "frames", prefix, size, True, before)
            out: list[_Loaded] = []
            writes: dict[str, list[tuple[str, Parked | None]]] = {}
            for key, parked in rows:
                cid, _, task = key[len(prefix) :].partition("/")  # `<id>` or `<id>/<task>`
                if task:
                    writes.setdefault(cid, []).append((key, parked))
                    continue
                out.append((key, parked, writes.pop(cid, [])))
                if len(out) == count:
                    break
            if len(out) == count or len(rows) < size:
                # nothing the witness saw parked in the range read is gone: a deleted newest
                # checkpoint is refused, never served as the one before it
                after = out[-1][0] if len(out) == count else ""
                yield call("io", "unseen", prefix, after, frozenset(key for key, _ in rows), before)
                return out
            size *= 4

    def _writes(
        self, thread: str, ns: str, cid: str, loaded: Sequence[tuple[str, Parked | None]]
    ) -> list[tuple[str, str, Any]]:
        """One checkpoint's pending writes, in LangGraph's order, from its write frames as loaded."""
        found: list[tuple[tuple[str, str, int], tuple[str, str, Any]]] = []
        want = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}
        for key, parked in loaded:
            if parked is None:
                continue
            body = self._bound(key, parked, want, _writes_body)
            task, path = body.task_id, body.task_path
            for idx, channel, vtype, vdata in body.writes:
                value = self.serde.loads_typed((vtype, vdata))
                found.append((writes_sort_key(path, task, idx), (task, channel, value)))
        found.sort(key=lambda item: item[0])
        return [write for _, write in found]

    def _get_tuple(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        thread = _thread_of(config)
        ns = str(_configurable(config).get("checkpoint_ns") or "")
        cid = get_checkpoint_id(config)
        want = {"thread_id": thread, "checkpoint_ns": ns}
        if cid:
            want["checkpoint_id"] = str(cid)
            found = yield from self._at(self._checkpoint_key(thread, ns, str(cid)))
        else:
            # the latest checkpoint and its writes in one ordered load; each frame's seal binds it
            # to its key, and its body names the thread, namespace and checkpoint id again (checked)
            found = yield from self._newest(f"{self._ns_prefix(thread, ns)}c/", 1)
        tuples = self._tuples(found, want, None, 1)
        return tuples[0] if tuples else None

    def _at(self, key: str) -> Plan[list[_Loaded]]:
        """The checkpoint at `key` with its writes, opened: [] when there is none."""
        parked = yield call("io", "load", key)
        if parked is None:
            return []
        writes = yield call("io", "frames", key + "/")
        yield call("io", "unseen", key + "/", "", frozenset(k for k, _ in writes))
        return [(key, parked, writes)]

    def _tuples(
        self, found: Sequence[_Loaded], want: dict[str, str], filter: dict[str, Any] | None, limit: int | None
    ) -> list[CheckpointTuple]:
        """The checkpoint tuples of `found` (opened frames), each checked against its key and `want`."""
        out: list[CheckpointTuple] = []
        for key, parked, writes in found:
            if parked is None:
                continue
            body = self._bound(key, parked, want, _checkpoint_body)
            metadata = self.serde.loads_typed((body.metadata_type, body.metadata))
            if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                continue
            out.append(
                self._tuple(
                    body, metadata, self._writes(body.thread_id, body.checkpoint_ns, body.checkpoint_id, writes)
                )
            )
            if limit is not None and len(out) >= limit:
                break
        return out

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Plan[list[CheckpointTuple]]:
        conf = _configurable(config) if config else {}
        thread = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        only = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        if limit is not None and limit <= 0:
            return []
        if thread is None:
            return (yield from self._list_everything(filter, only, before_id, limit))
        thread = str(thread)
        want = {"thread_id": thread}
        if ns is not None:
            want["checkpoint_ns"] = str(ns)
            spaces = [self._ns_prefix(thread, str(ns))]
        else:
            spaces = yield from self._namespaces(thread)
        out: list[CheckpointTuple] = []
        for space in spaces:  # each namespace's newest matches, then the newest of them all
            prefix = f"{space}c/"
            bound = None if before_id is None else prefix + _segment(str(before_id))
            if only is not None:
                key = prefix + _segment(str(only))
                found = [] if bound is not None and key >= bound else (yield from self._at(key))
                out += self._tuples(found, want, filter, limit)
                continue
            out += yield from self._matching(prefix, want, filter, limit, bound)
        if len(spaces) > 1:
            out.sort(key=lambda t: str(t.config["configurable"]["checkpoint_id"]), reverse=True)
        return out if limit is None else out[:limit]

    def _matching(
        self, prefix: str, want: dict[str, str], filter: dict[str, Any] | None, limit: int | None, before: str | None
    ) -> Plan[list[CheckpointTuple]]:
        """One namespace's checkpoints newest first, before `before`, that match `filter`: the first `limit`.

        A page at a time from where the last one ended: the page `list(limit=n, before=...)` asks
        for costs one bounded load whatever the length of the history (more only while `filter`
        passes over checkpoints).
        """
        out: list[CheckpointTuple] = []
        while True:
            count = _PAGE if limit is None else limit - len(out)
            found = yield from self._newest(prefix, count, before)
            out += self._tuples(found, want, filter, None if limit is None else limit - len(out))
            if len(found) < count or (limit is not None and len(out) >= limit):
                return out
            before = found[-1][0]

    def _namespaces(self, thread: str) -> Plan[list[str]]:
        """The key prefixes (`<thread>/<ns>/`) of the thread's namespaces: one bounded look each.

        From the last key down: the namespace of the last key before the previous namespace's
        first possible key, until there is none.
        """
        base = self._thread_prefix(thread)
        spaces: list[str] = []
        before: str | None = None
        while True:
            key = yield call("io", "last_key", base, before)
            if key is None:
                return spaces
            before = f"{base}{key[len(base) :].split('/', 1)[0]}/"
            spaces.append(before)

    def _list_everything(
        self, filter: dict[str, Any] | None, only: Any, before_id: Any, limit: int | None
    ) -> Plan[list[CheckpointTuple]]:
        """`list` with no thread: every checkpoint under the prefix, from one listing of their keys."""
        prefix = self.prefix
        rows = yield call("io", "heads", prefix, None, True)
        yield call("io", "unseen", prefix, "", frozenset(row.key for row in rows))
        candidates = self._checkpoints(rows, only, before_id)
        out: list[CheckpointTuple] = []
        page = _PAGE if limit is None else min(_PAGE, limit)
        for start in range(0, len(candidates), page):
            chunk = candidates[start : start + page]
            # each checkpoint of the page and all their writes in one batched load
            loaded = yield call("io", "load_many", [k for key, wkeys in chunk for k in (key, *wkeys)])
            found: list[_Loaded] = []
            at = 0
            for key, wkeys in chunk:
                found.append((key, loaded[at], list(zip(wkeys, loaded[at + 1 : at + 1 + len(wkeys)], strict=True))))
                at += 1 + len(wkeys)
            out += self._tuples(found, {}, filter, None if limit is None else limit - len(out))
            if limit is not None and len(out) >= limit:
                return out
        return out

    def _checkpoints(self, rows: Sequence[Listing], only: Any, before_id: Any) -> list[tuple[str, list[str]]]:
        """The checkpoints among `rows` (newest first, across namespaces and threads), each with its write keys."""
        writes: dict[str, list[str]] = {}
        candidates = []
        for row in rows:
            parts = self._parts(row.key)
            if parts.kind != "c":
                continue
            if parts.task:
                writes.setdefault(row.key.rsplit("/", 1)[0], []).append(row.key)
                continue
            if only is not None and parts.cid != _segment(str(only)):
                continue
            if before_id is not None and parts.cid >= _segment(str(before_id)):
                continue
            candidates.append((parts.cid, row.key))
        candidates.sort(key=lambda item: item[0], reverse=True)
        return [(key, writes.get(key, [])) for _, key in candidates]

    def _put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> Plan[RunnableConfig]:
        key, env, stored = self._checkpoint_envelope(config, checkpoint, metadata)
        yield call("io", "save", key, env)
        return stored

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Plan[None]:
        conf = _configurable(config)
        thread = _thread_of(config)
        ns = str(conf.get("checkpoint_ns") or "")
        cid = str(conf["checkpoint_id"])
        key = self._writes_prefix(thread, ns, cid) + _segment(str(task_id))
        new: dict[int, tuple[int, str, str, bytes]] = {}
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            vtype, vdata = self.serde.dumps_typed(value)
            new[idx] = (idx, channel, vtype, vdata)
        head = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid, "task_id": str(task_id)}
        condition: dict[str, Any] = {"if_absent": True}
        merged = dict(new)
        while True:
            body = _WritesBody(thread, ns, cid, str(task_id), task_path, sorted(merged.values(), key=lambda w: w[0]))
            env = Envelope(provider=PROVIDER, provider_state=_encode_body(body), reason="pending writes")
            try:
                yield call("io", "save", key, env, **condition)
            except TokenMismatch:
                pass
            else:
                yield from self._ask(thread, ns, cid, str(task_id), writes)
                return None
            parked = yield call("io", "load", key)
            if parked is None:
                condition, merged = {"if_absent": True}, dict(new)
                continue
            old = self._bound(key, parked, head, _writes_body)
            # as LangGraph's own savers: a regular write already stored stays; special channels are replaced
            merged = {w[0]: w for w in old.writes}
            for idx, write in new.items():
                if idx < 0 or idx not in merged:
                    merged[idx] = write
            condition = {"if_match": parked.token}

    def _question_key(self, thread: str, ns: str, cid: str, interrupt_id: str) -> str:
        return f"{self._ns_prefix(thread, ns)}q/{_segment(cid)}/{_segment(interrupt_id)}"

    def _claim_key(self, thread: str, ns: str, cid: str, interrupt_id: str) -> str:
        return f"{self._ns_prefix(thread, ns)}r/{_segment(cid)}/{_segment(interrupt_id)}"

    def _ask(self, thread: str, ns: str, cid: str, task: str, writes: Sequence[tuple[str, Any]]) -> Plan[None]:
        """Park each interrupt among `writes` as a berth question (`berth questions`, the inbox).

        One question per interrupt, keyed and identified by the interrupt's id, so parallel
        branches that each interrupt ask one question each, and an answer names its interrupt.
        """
        for channel, value in writes:
            if channel != INTERRUPT:
                continue
            for i, item in enumerate(value if isinstance(value, (list, tuple)) else [value], 1):
                interrupt_id = str(getattr(item, "id", "") or f"{task}-{i}")
                claimed = yield call("io", "exists", self._claim_key(thread, ns, cid, interrupt_id))
                if claimed:  # raised again by a branch re-run while its own resume waits its turn
                    continue
                key = self._question_key(thread, ns, cid, interrupt_id)
                yield call("io", "ask", key, item, self.now() + self.default_deadline, interrupt_id)
        return None

    def _delete_thread(self, thread_id: str) -> Plan[None]:
        yield call("io", "delete_prefix", self._thread_prefix(str(thread_id)))
        return None

    def _delete_checkpoints(self, rows: Sequence[Listing]) -> Plan[None]:
        for row in rows:
            yield call("io", "delete", row.key, row.token)
            yield call("io", "delete_prefix", row.key + "/")  # its writes
        return None

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return None
        rows = yield call("io", "heads", self.prefix)
        doomed = [row for row in rows if self._is_checkpoint(row.key) and row.run_id in wanted]
        yield from self._delete_checkpoints(doomed)
        return None

    def _copy_thread(self, source: str, target: str) -> Plan[None]:
        # checkpoints and their writes only: resume claims, run leases and questions belong to the
        # source's interrupts (a claim past its deadline would raise Expired on load)
        listed = yield call("io", "heads", self._thread_prefix(str(source)))
        rows = [row for row in listed if self._parts(row.key).kind == "c"]
        dest = self._thread_prefix(str(target))
        for start in range(0, len(rows), _PAGE):
            keys = [row.key for row in rows[start : start + _PAGE]]
            loaded = yield call("io", "load_many", keys)
            for key, parked in zip(keys, loaded, strict=True):
                if parked is None:
                    continue
                body = self._bound(key, parked, {"thread_id": str(source)}, _any_body)
                body["thread_id"] = str(target)
                env = parked.envelope.replace(provider_state=orjson.dumps(body), created_at=None)
                yield call("io", "save", dest + key[len(self._thread_prefix(str(source))) :], env)
        return None

    def _prune(self, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread in thread_ids:
            if strategy == "delete":
                yield from self._delete_thread(thread)
                continue
            rows = yield call("io", "heads", self._thread_prefix(str(thread)))
            latest: dict[str, Listing] = {}
            for row in rows:
                parts = self._parts(row.key)
                if self._is_checkpoint(row.key) and (
                    parts.ns not in latest or parts.cid > self._parts(latest[parts.ns].key).cid
                ):
                    latest[parts.ns] = row
            keep = {row.key for row in latest.values()}
            yield from self._delete_checkpoints(
                [row for row in rows if self._is_checkpoint(row.key) and row.key not in keep]
            )
        return None

    def _claim(self, snapshot: StateSnapshot, value: Any, deadline: timedelta, won: _Claim) -> Plan[_Claim]:
        """Claim the resume of the interrupts `value` answers: each for exactly one caller, then the run lease.

        `snapshot` is the graph's `get_state(config)`: its checkpoint and the interrupts still
        pending there (LangGraph's rule, applied by LangGraph's public API: an interrupt of a task
        with no output yet). A resume map (`{interrupt_id: value}`) claims each id it names that
        is pending: an answer bound to its interrupt never answers another. A plain value names
        no interrupt: it claims the one pending interrupt only when that is provably the only
        one the thread ever asked (`_plain_value_binds`), else nothing. Every claim is one
        conditional write (`if_absent`) keyed by thread, namespace, checkpoint and interrupt id:
        the commit point, before the graph runs. A caller that wins any waits for the
        checkpoint's run lease (so branches answered at once run one after the other, each
        seeing the other's output, and the step completes), re-checking the deadline until it
        holds it. Each step is recorded in `won` as it is taken; `won.resume` is empty when it
        won nothing.
        """
        pending = {item.id: item for item in snapshot.interrupts}
        if not pending or snapshot.created_at is None:
            return won
        conf = snapshot.config["configurable"]
        thread, ns, cid = str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), str(conf["checkpoint_id"])
        if _is_resume_map(value):
            wanted = {iid: answer for iid, answer in value.items() if iid in pending}
        elif len(pending) == 1:
            (only,) = pending
            binds = yield from self._plain_value_binds(thread, ns, cid, only)
            wanted = {only: value} if binds else {}
        else:
            raise ValueError(
                f"thread {thread!r} waits on {len(pending)} interrupts ({', '.join(sorted(pending))}): "
                "resume with a map {interrupt_id: value} naming the ones answered"
            )
        if not wanted:
            return won
        asked = datetime.fromisoformat(snapshot.created_at)
        if asked.tzinfo is None:
            asked = asked.replace(tzinfo=timezone.utc)
        won.where, won.due = (thread, ns, cid), asked + deadline
        self._check_due(won)
        for iid, answer in wanted.items():
            body = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid, "interrupt_id": iid}
            # no deadline: the record that this interrupt was resumed lasts as long as its thread,
            # so a plain value delivered again later is never taken for a later interrupt's answer
            claim = Envelope(provider=PROVIDER, provider_state=orjson.dumps(body), reason="resume claimed")
            key = self._claim_key(thread, ns, cid, iid)
            try:  # the commit point: one conditional write per interrupt, before the graph runs
                token = yield commit(
                    call("io", "save", key, claim, if_absent=True), undo=functools.partial(self._delete_plan, key)
                )
            except TokenMismatch:
                continue
            won.resume[iid], won.tokens[iid], won.prompts[iid] = answer, token, pending[iid]
        for iid in list(won.resume):
            ask = functools.partial(self._ask_again, won, iid)  # cancelled later: the question is back first
            yield commit(call("io", "consume", self._question_key(thread, ns, cid, iid), iid), undo=ask)
        if won.resume:
            yield from self._lease(won)
        return won

    def _plain_value_binds(self, thread: str, ns: str, cid: str, iid: str) -> Plan[bool]:
        """Whether a plain value (no interrupt id) provably answers `iid`: no other interrupt was ever asked here.

        Read after the pending interrupt was: a claim record in the namespace (any interrupt
        resumed through `resume_once`, kept as long as the thread), or a question for another
        interrupt (one resumed some other way, or asked beside it), means the value may have
        been given for an earlier interrupt -- a retried delivery -- so it binds to nothing.
        """
        base = self._ns_prefix(thread, ns)
        claimed = yield call("io", "heads", base + "r/", 1)
        if claimed:
            return False
        asked: list[str] = yield call("io", "asked", base + "q/", 2)
        return all(key == self._question_key(thread, ns, cid, iid) for key in asked)

    def _check_due(self, won: _Claim) -> None:
        """Raise `Expired` once the claimed interrupt's deadline has passed: it is never resumed."""
        if won.due is None or self.now() < won.due:
            return
        thread, ns, cid = won.where
        key = f"{self._ns_prefix(thread, ns)}r/{_segment(cid)}"
        raise Expired(
            f"the interrupt at {where(self.identity, key)} passed its deadline {won.due.isoformat()}: never resumed",
            identity=self.identity,
            key=key,
            deadline=won.due,
        )

    def _lease(self, won: _Claim) -> Plan[None]:
        """Hold the checkpoint's run lease: wait while another resume runs there (or until its lease lapses).

        The deadline is checked again on every look and once the lease is held -- the moment the
        run resumes -- so a resumer that waited behind another branch never runs past it.
        """
        thread, ns, cid = won.where
        won.lease_key = f"{self._ns_prefix(thread, ns)}l/{_segment(cid)}"
        body = orjson.dumps({"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid})
        pause = _LEASE_POLL[0]
        while True:
            lease = Envelope(
                provider=PROVIDER, provider_state=body, reason="resume running", deadline=self.now() + _LEASE
            )
            try:
                # the lease held, the resume is the caller's: a cancellation from here on is withdrawn
                won.lease_token = yield commit(
                    call("io", "save", won.lease_key, lease, if_absent=True),
                    undo=functools.partial(self._delete_plan, won.lease_key),
                    delivers=True,
                )
            except TokenMismatch:
                self._check_due(won)
                yield call("io", "clear_expired", won.lease_key)  # a resumer that died holding it
                yield call("io", "sleep", pause)
                pause = min(pause * 2, _LEASE_POLL[1])
                continue
            self._check_due(won)
            return None

    def _release(self, won: _Claim) -> Plan[None]:
        if won.lease_token is not None:
            yield call("io", "delete", won.lease_key, won.lease_token)
            won.lease_token = None
        return None

    def _delete_plan(self, key: str, token: Token) -> Plan[None]:
        """Delete what a commit wrote at `key` (an `undo` of `berth._plan.commit`)."""
        yield call("io", "delete", key, token)
        return None

    def _ask_again(self, won: _Claim, iid: str, _consumed: Any = None) -> Plan[None]:
        """Ask the question of interrupt `iid` again (it was consumed by a claim being handed back)."""
        thread, ns, cid = won.where
        if won.due is not None:
            yield call("io", "ask", self._question_key(thread, ns, cid, iid), won.prompts[iid], won.due, iid)
        return None

    def _unclaim(self, won: _Claim) -> Plan[None]:
        """Hand back what `won` took (a claim that failed before the graph ran): the interrupts are resumable again.

        Each interrupt's question is asked again first (kept if still pending), then its claim
        record is deleted (with the token it was written with), then the run lease released.
        """
        thread, ns, cid = won.where
        for iid in list(won.tokens):
            # asked again whether or not its consume got that far (a question still pending is kept)
            yield from self._ask_again(won, iid)
            yield call("io", "delete", self._claim_key(thread, ns, cid, iid), won.tokens.pop(iid))
            won.resume.pop(iid, None)
        yield from self._release(won)
        return None

    # -- the BaseCheckpointSaver API ----------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        return run(plan, {"io": self._sync_io})

    async def _async_read(self, plan: Plan[T]) -> T:
        """A read plan (`aget_tuple`, `alist`), awaited."""
        result: T = await self._async_run(plan)
        return result

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names, or the latest of its thread and namespace; `None` if there is none."""
        return self._run(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of `config`'s thread (and namespace when it names one), or of all threads."""
        yield from self._run(self._list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Seal and save `checkpoint` (one frame); return the config that names it."""
        return self._run(self._put(config, checkpoint, metadata))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Seal and save one task's pending writes of the checkpoint `config` names (one frame per task)."""
        return self._run(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of the thread."""
        return self._run(self._delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of `run_ids`."""
        return self._run(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of one thread to another (resealed, bound to the target)."""
        return self._run(self._copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's newest checkpoint (and its writes); `delete`: delete the threads."""
        return self._run(self._prune(thread_ids, strategy))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple`, awaited."""
        result: CheckpointTuple | None = await self._async_read(self._get_tuple(config))
        return result

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list`, awaited."""
        for item in await self._async_read(self._list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put`, awaited."""
        stored: RunnableConfig = await self._async_run(self._put(config, checkpoint, metadata))
        return stored

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """`put_writes`, awaited."""
        await self._async_run(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread`, awaited."""
        await self._async_run(self._delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs`, awaited."""
        await self._async_run(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread`, awaited."""
        await self._async_run(self._copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune`, awaited."""
        await self._async_run(self._prune(thread_ids, strategy))


class BerthSaver(_SaverCore):
    """A LangGraph checkpoint saver over a `berth.Store`; its `a*` methods run the same calls in a worker thread.

    Args:
        store: the berth store (its sealer seals every checkpoint; its identity namespaces them).
        prefix: where under the store's keys the savers' frames live (`''` or ending in `/`).
        serde: LangGraph's serializer for the values inside (default: its `JsonPlusSerializer`);
            berth seals whatever it produces.
    """

    def __init__(self, store: Store, *, prefix: str = "langgraph/", serde: SerializerProtocol | None = None):
        if not isinstance(store, Store):
            raise TypeError(f"BerthSaver needs a berth.Store, got {type(store).__name__}")
        super().__init__(identity=store.identity, prefix=prefix, serde=serde)
        self.store = store
        self.now = store.now
        self._sync_io = _SyncIO(store)

    async def _async_run(self, plan: Plan[T]) -> T:
        return await asyncio.to_thread(self._run, plan)

    def _async_targets(self) -> dict[str, Any]:
        return {"io": InThreads(self._sync_io)}


class AsyncBerthSaver(_SaverCore):
    """A LangGraph checkpoint saver over a `berth.aio.AsyncStore`; its sync methods use the store's sync twin.

    Arguments as `BerthSaver`'s.
    """

    def __init__(self, store: AsyncStore, *, prefix: str = "langgraph/", serde: SerializerProtocol | None = None):
        if not isinstance(store, AsyncStore):
            raise TypeError(f"AsyncBerthSaver needs a berth.aio.AsyncStore, got {type(store).__name__}")
        super().__init__(identity=store.identity, prefix=prefix, serde=serde)
        self.store = store
        self.now = store.now
        self._sync_io = _SyncIO(store.sync)
        self._async_io = _AsyncIO(store)

    async def _async_run(self, plan: Plan[T]) -> T:
        return await arun(plan, {"io": self._async_io})

    def _async_targets(self) -> dict[str, Any]:
        return {"io": self._async_io}

    async def _async_read(self, plan: Plan[T]) -> T:
        """Over a sync backend in worker threads (SQLite, file...): the whole read in one hop, on its twin.

        Awaited call by call, `aget_tuple` was ~9 hops to the backend's threads (a listing of one
        row is four: make, two pages, close) and cost 2.6x the sync `get_tuple`. The sync twin is
        the same backend and store (same connections, same checks), so the read is the same.
        """
        backend = self.store.backend
        if isinstance(backend, ThreadedBackend):
            return await backend.run_sync(self._run, plan)
        return await self._async_run(plan)


def _saver_of(graph: Any) -> _SaverCore:
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, _SaverCore):
        raise TypeError(
            "resume_once needs a graph compiled with checkpointer=BerthSaver(...) or AsyncBerthSaver(...), "
            f"got {type(saver).__name__}"
        )
    return saver


def _check_deadline(deadline: timedelta) -> timedelta:
    if not isinstance(deadline, timedelta) or deadline <= timedelta(0):
        raise ValueError(f"deadline must be a positive timedelta, got {deadline!r}")
    return deadline


def resume_once(graph: Any, config: RunnableConfig, value: Any, *, deadline: timedelta = DEFAULT_DEADLINE) -> Any:
    """Resume the interrupt(s) `value` answers, for exactly one caller per interrupt.

    `value` says which interrupt it answers: LangGraph's resume map, `{interrupt_id: answer, ...}`
    (the ids are `Interrupt.id`, and the berth question's id). Each id that is pending is claimed
    on its own and the graph runs with `Command(resume=<the ids won>)`; an id not pending
    (answered already, or the thread moved on) is left out, so a retried or duplicated delivery
    of an answer never answers a later interrupt. A plain value names no interrupt: it resumes
    the thread's one pending interrupt only while that is provably the only one the thread ever
    asked (no interrupt of its namespace was resumed through `resume_once`, no other question
    is open), and otherwise resumes nothing and returns `None`.

    The claim -- one conditional write (`save(..., if_absent=True)`) per interrupt, under the thread,
    namespace, checkpoint id and interrupt id -- is the commit point, made before the graph runs:
    of any number of callers racing in any process, one wins each interrupt and gets the graph's
    output; the others, and any caller when the thread waits on no interrupt `value` answers, get
    `None`. Resumes of different interrupts of one checkpoint run one after the other (a run
    lease), so the step completes once every branch has its answer; the deadline is checked
    again once the lease is held. Anything that fails or is interrupted before the graph
    starts hands the claim back (the interrupt stays resumable); once the graph runs, an
    error leaves the claim taken.

    Args:
        graph: a compiled graph whose checkpointer is a `BerthSaver` or `AsyncBerthSaver`.
        config: the thread's config (`{"configurable": {"thread_id": ...}}`).
        value: a map of interrupt id to what `interrupt()` returns in the resumed node (or a plain value, above).
        deadline: how long after the interrupted checkpoint was written it may still be resumed.

    Raises:
        berth.Expired: the deadline passed, before the claim or while waiting for the run lease; never resumed.
        ValueError: the thread waits on several interrupts and `value` is not a resume map.
        TypeError: the graph's checkpointer is not a berth saver.
    """
    from langgraph.types import Command

    saver = _saver_of(graph)
    deadline = _check_deadline(deadline)
    won = _Claim()
    try:
        saver._run(saver._claim(graph.get_state(config), value, deadline, won))
    except Expired:
        saver._run(saver._release(won))
        raise
    except BaseException:
        saver._run(saver._unclaim(won))
        raise
    if not won.resume:
        return None
    try:
        return graph.invoke(Command(resume=won.resume), config)
    finally:
        saver._run(saver._release(won))


async def aresume_once(
    graph: Any, config: RunnableConfig, value: Any, *, deadline: timedelta = DEFAULT_DEADLINE
) -> Any:
    """`resume_once`, awaited (`graph.ainvoke`); cancelled at any await, it never loses the interrupt.

    Cancelled while it claims (`berth._plan`'s commit points): a write under way finishes, then
    whatever was claimed, consumed and leased is handed back and `CancelledError` raised; the
    interrupt stays resumable. Cancelled once it holds the run lease: the resume is the
    caller's -- the graph runs to its end and its output is returned, the cancellation withdrawn
    (as berth's integrations' wakes do), never a half-resumed run dropped.
    """
    from langgraph.types import Command

    saver = _saver_of(graph)
    deadline = _check_deadline(deadline)
    snapshot = await graph.aget_state(config)
    won, targets = _Claim(), saver._async_targets()
    try:
        # berth._plan's driver: from the first claim on, each write is awaited to its outcome; a
        # cancellation before the run lease is held hands back every claim, consumed question and
        # lease taken (their undo), after it the resume is the caller's
        await arun(saver._claim(snapshot, value, deadline, won), targets)
    except asyncio.CancelledError:
        raise
    except Expired:
        await _cleanup(arun(saver._release(won), targets))
        raise
    except BaseException:
        await _cleanup(arun(saver._unclaim(won), targets))
        raise
    if not won.resume:
        return None
    try:
        # the graph runs to its end and its output is returned whatever happens to the caller
        # meanwhile, as berth's integrations' wakes run a resumed run: never a half-resumed run dropped
        return await _delivered(graph.ainvoke(Command(resume=won.resume), config))
    finally:
        await _cleanup(arun(saver._release(won), targets))


async def _delivered(work: Awaitable[T]) -> T:
    """`work` to its outcome through any cancellation of the caller, which is withdrawn (`Task.uncancel`)."""
    task, late = await settle(work)
    current = asyncio.current_task()
    for _ in late if current is not None else ():
        current.uncancel()  # type: ignore[union-attr]
    result: T = task.result()
    return result


async def _cleanup(work: Awaitable[Any]) -> None:
    """Clean-up after the outcome is known: to its end through any cancellation (withdrawn), a failure logged."""
    try:
        await _delivered(work)
    except Exception as exc:
        log.warning("berth: a LangGraph resume's clean-up failed: %s", exc)
