"""What the savers' frames hold and where they live: keys, the sealed bodies, the configs they name.

Keys, under the saver's `prefix` (default ``langgraph/``)::

    <thread>/<ns>/c/<checkpoint id>               the checkpoint and its metadata
    <thread>/<ns>/c/<checkpoint id>/<task id>     one task's pending writes
    <thread>/<ns>/q/<checkpoint id>/<interrupt>   an interrupt's question (the question store's namespace)
    <thread>/<ns>/r/<checkpoint id>/<interrupt>   the record that an interrupt was resumed (`resume_once`)
    <thread>/<ns>/l/<checkpoint id>               the run lease of a checkpoint being resumed

Each part is escaped into one key segment (`segment`). Every function here takes the saver
(`SaverState`) and reads its serializer when called: LangGraph's `with_allowlist` clones a saver
with another one.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, Generic, Protocol, TypeVar

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from berth._envelope import Envelope
from berth._errors import IntegrityError, where
from berth._plan import role
from berth._store import Listing, Parked
from berth._token import Token

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_DEADLINE",
    "PAGE",
    "PROVIDER",
    "BodyCodec",
    "CheckpointBody",
    "Loaded",
    "Parts",
    "SaverState",
    "SaverSteps",
    "WritesBody",
    "any_body",
    "bound",
    "checkpoint_body",
    "checkpoint_envelope",
    "checkpoint_key",
    "claim_key",
    "config_of",
    "configurable",
    "encode_body",
    "is_checkpoint",
    "ns_prefix",
    "parts",
    "question_key",
    "segment",
    "thread_of",
    "thread_prefix",
    "tuples",
    "writes_body",
    "writes_prefix",
]

DEFAULT_DEADLINE = timedelta(days=14)
"""How long an interrupt waits for its resume unless `resume_once` is told otherwise."""

PROVIDER = "langgraph"
"""The envelope's `provider` for frames written by these savers."""

PAGE = 100
"""Checkpoints loaded per batch while listing or copying."""

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:@+=,")
_SEGMENT_MAX = 180


class SaverState(Protocol):
    """What the savers' plans read of a saver (`berth.langgraph.BerthSaver`, `AsyncBerthSaver`)."""

    identity: str
    prefix: str
    serde: SerializerProtocol
    default_deadline: timedelta
    now: Callable[[], datetime]


@functools.lru_cache(maxsize=4096)  # a thread's and a checkpoint's segments come up on every call
def segment(value: str) -> str:
    """`value` as one valid, injective key segment.

    `~XX` per UTF-8 byte outside ``A-Z a-z 0-9 - _ : @ + = ,``; the empty string is ``~``; a part
    whose escaped form passes 180 bytes is named by its SHA-256 (``~h<hex>``) -- never cut: the
    full value rides in the sealed body and is compared on every load.
    """
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


@role
class SaverSteps(Protocol):
    """The savers' steps in plans (`berth._plan.step`): the store calls they make, and the question store's.

    `berth.langgraph._io.SaverIO` plays it over a `berth.Store`; `AsyncSaverIO`, awaited, over a
    `berth.aio.AsyncStore`.
    """

    def ask(self, key: str, value: Any, deadline: datetime, question_id: str) -> None:
        """Park an interrupt's question (once: a question already asked is kept)."""
        ...

    def consume(self, key: str, question_id: str) -> None:
        """Consume an interrupt's question: it was answered by a resume."""
        ...

    def asked(self, prefix: str, limit: int) -> list[str]:
        """The keys of up to `limit` open questions under `prefix`."""
        ...

    def exists(self, key: str) -> bool:
        """Whether a frame is parked at `key` (expired or not)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Pause between looks at a held run lease."""
        ...

    def clear_expired(self, key: str) -> None:
        """Delete the frame at `key` if it is past its deadline."""
        ...

    def heads(self, prefix: str, limit: int | None = None, reverse: bool = False) -> list[Listing]:
        """The listings (headers only) under `prefix`."""
        ...

    def unseen(self, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
        """Refuse (`IntegrityError`) a key in the range read that a witness saw parked but `seen` lacks."""
        ...

    def load(self, key: str) -> Parked | None:
        """`Store.load`."""
        ...

    def load_many(self, keys: Sequence[str]) -> list[Parked | None]:
        """`Store.load_many`: each key's frame, opened, or None."""
        ...

    def frames(
        self, prefix: str, limit: int | None = None, reverse: bool = False, before: str | None = None
    ) -> list[tuple[str, Parked]]:
        """`Store.load_prefix`: the frames under `prefix`, opened, in key order (or reversed)."""
        ...

    def last_key(self, prefix: str, before: str | None) -> str | None:
        """The last key under `prefix` before `before`, or None."""
        ...

    def save(self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None) -> Token:
        """`Store.save`."""
        ...

    def delete(self, key: str, token: Token) -> None:
        """`Store.delete`; a frame re-saved or removed meanwhile is left as it is."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every frame under `prefix`; how many."""
        ...


class CheckpointBody(msgspec.Struct):
    """A checkpoint frame's sealed body: where it belongs, then the serializer's typed bytes as they are.

    Written as MessagePack (`CONTENT_TYPE`, a binary state: the serializer's bytes are msgpack
    `bin`, copied in and out, never base64); frames written before binary state hold it as JSON
    (the bytes base64), and still open. Typed, so msgspec refuses any other shape.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes


class WritesBody(msgspec.Struct):
    """One task's pending writes of a checkpoint: `(idx, channel, type, bytes)` each, ordered by idx."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[tuple[int, str, str, bytes]]


CONTENT_TYPE = "application/vnd.berth.langgraph+msgpack"
"""The content type of the savers' bodies: a MessagePack map (`CheckpointBody`, `WritesBody`)."""

encode_body = msgspec.msgpack.Encoder().encode
_Body = TypeVar("_Body")


class BodyCodec(Generic[_Body]):
    """How a body is read: MessagePack (binary state, `CONTENT_TYPE`), or JSON (frames written before it)."""

    __slots__ = ("json", "msgpack", "what")

    def __init__(self, kind: type[_Body], what: str):
        self.msgpack = msgspec.msgpack.Decoder(kind)
        self.json = msgspec.json.Decoder(kind)
        self.what = what

    def decode(self, env: Envelope) -> _Body:
        """`env`'s state as a body; raises `msgspec.DecodeError`/`ValidationError`, or `ValueError`."""
        if env.content_type == CONTENT_TYPE:
            return self.msgpack.decode(env.provider_state)
        if env.content_type is None:
            return self.json.decode(env.provider_state)
        raise ValueError(env.content_type)


checkpoint_body = BodyCodec(CheckpointBody, "checkpoint")
writes_body = BodyCodec(WritesBody, "pending writes")
any_body = BodyCodec(dict[str, Any], "checkpoint or pending writes")
_first = itemgetter(0)
Loaded = tuple[str, Parked | None, Sequence[tuple[str, Parked | None]]]
"""A checkpoint's key and frame as loaded (None: gone meanwhile), with its writes' keys and frames."""


def _names(body: Any, want: dict[str, str]) -> bool:
    """Whether a decoded body (a typed struct, or a dict) holds each of `want`'s fields with its value."""
    if type(body) is dict:
        return all(body.get(name) == value for name, value in want.items())
    for name, value in want.items():  # a loop, not all(): this runs for every frame a read opens
        if getattr(body, name, None) != value:
            return False
    return True


class Parts:
    """A frame's key, split: thread, namespace and kind segments, then the checkpoint id's (and task's).

    A checkpoint is kind ``c`` with no task; its pending writes are kind ``c`` with one.
    """

    __slots__ = ("cid", "kind", "ns", "task", "thread")

    def __init__(self, rest: str):
        split = rest.split("/")
        self.thread, self.ns, self.kind = (split + ["", "", ""])[:3]
        self.cid = split[3] if len(split) > 3 else ""
        self.task = split[4] if len(split) > 4 else ""


# -- configs ----------------------------------------------------------------------------------


def configurable(config: RunnableConfig) -> dict[str, Any]:
    return dict(config.get("configurable") or {})


def thread_of(config: RunnableConfig) -> str:
    value = configurable(config).get("thread_id")
    if value is None:
        raise ValueError("a LangGraph config for a berth saver needs configurable.thread_id")
    return str(value)


def config_of(thread: str, ns: str, cid: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}


# -- keys -------------------------------------------------------------------------------------


def thread_prefix(saver: SaverState, thread: str) -> str:
    return f"{saver.prefix}{segment(thread)}/"


def ns_prefix(saver: SaverState, thread: str, ns: str) -> str:
    return f"{thread_prefix(saver, thread)}{segment(ns)}/"


def checkpoint_key(saver: SaverState, thread: str, ns: str, cid: str) -> str:
    return f"{ns_prefix(saver, thread, ns)}c/{segment(cid)}"


def writes_prefix(saver: SaverState, thread: str, ns: str, cid: str) -> str:
    return f"{checkpoint_key(saver, thread, ns, cid)}/"


def question_key(saver: SaverState, thread: str, ns: str, cid: str, interrupt_id: str) -> str:
    return f"{ns_prefix(saver, thread, ns)}q/{segment(cid)}/{segment(interrupt_id)}"


def claim_key(saver: SaverState, thread: str, ns: str, cid: str, interrupt_id: str) -> str:
    return f"{ns_prefix(saver, thread, ns)}r/{segment(cid)}/{segment(interrupt_id)}"


def parts(saver: SaverState, key: str) -> Parts:
    return Parts(key[len(saver.prefix) :])


def is_checkpoint(saver: SaverState, key: str) -> bool:
    split = parts(saver, key)
    return split.kind == "c" and not split.task


# -- frames -----------------------------------------------------------------------------------


def bound(saver: SaverState, key: str, parked: Parked, want: dict[str, str], codec: BodyCodec[_Body]) -> _Body:
    """The sealed body at `key` as `codec` reads it, after checking it names what the key does."""
    env = parked.envelope
    body: _Body | None = None
    if env.provider == PROVIDER:
        try:
            body = codec.decode(env)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            pass
    if body is None or not _names(body, want):
        raise IntegrityError(
            f"frame at {where(saver.identity, key)} is not the LangGraph {codec.what} its key names: refused",
            identity=saver.identity,
            key=key,
        )
    return body


def checkpoint_envelope(
    saver: SaverState, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
) -> tuple[str, Envelope, RunnableConfig]:
    """The key, the envelope and the config of a checkpoint to save."""
    conf = configurable(config)
    thread = thread_of(config)
    ns = str(conf.get("checkpoint_ns") or "")
    cid = str(checkpoint["id"])
    ctype, cdata = saver.serde.dumps_typed(checkpoint)
    merged = get_checkpoint_metadata(config, metadata)
    mtype, mdata = saver.serde.dumps_typed(merged)
    run_id = merged.get("run_id")
    parent = conf.get("checkpoint_id")
    body = CheckpointBody(thread, ns, cid, None if parent is None else str(parent), ctype, cdata, mtype, mdata)
    env = Envelope(
        provider=PROVIDER,
        provider_state=encode_body(body),
        content_type=CONTENT_TYPE,
        run_id=run_id if isinstance(run_id, str) else "",
        reason="checkpoint",
    )
    return checkpoint_key(saver, thread, ns, cid), env, config_of(thread, ns, cid)


def _writes(
    saver: SaverState, thread: str, ns: str, cid: str, loaded: Sequence[tuple[str, Parked | None]]
) -> list[tuple[str, str, Any]]:
    """One checkpoint's pending writes, in LangGraph's order, from its write frames as loaded."""
    if not loaded:
        return []
    found: list[tuple[tuple[str, str, int], tuple[str, str, Any]]] = []
    want = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}
    loads = saver.serde.loads_typed
    for key, parked in loaded:
        if parked is None:
            continue
        body = bound(saver, key, parked, want, writes_body)
        task, path = body.task_id, body.task_path
        for idx, channel, vtype, vdata in body.writes:
            found.append((writes_sort_key(path, task, idx), (task, channel, loads((vtype, vdata)))))
    found.sort(key=_first)
    return [write for _, write in found]


def tuples(
    saver: SaverState,
    found: Sequence[Loaded],
    want: dict[str, str],
    filter: dict[str, Any] | None,
    limit: int | None,
) -> list[CheckpointTuple]:
    """The checkpoint tuples of `found` (opened frames), each checked against its key and `want`."""
    out: list[CheckpointTuple] = []
    loads = saver.serde.loads_typed
    for key, parked, writes in found:
        if parked is None:
            continue
        body = bound(saver, key, parked, want, checkpoint_body)
        metadata = loads((body.metadata_type, body.metadata))
        if filter and not all(metadata.get(k) == v for k, v in filter.items()):
            continue
        thread, ns, cid, parent = body.thread_id, body.checkpoint_ns, body.checkpoint_id, body.parent_checkpoint_id
        out.append(
            CheckpointTuple(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}},
                loads((body.type, body.checkpoint)),
                metadata,
                config_of(thread, ns, parent) if parent else None,
                _writes(saver, thread, ns, cid, writes),
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out
