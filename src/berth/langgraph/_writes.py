"""The savers' writes, as plans over the role `SaverSteps`: checkpoints, pending writes (their interrupts asked as
berth questions), and deleting, copying and pruning threads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.types import INTERRUPT

from berth._envelope import Envelope
from berth._errors import TokenMismatch
from berth._plan import Plan, step
from berth._store import Listing
from berth.langgraph._frames import (
    CONTENT_TYPE,
    PAGE,
    PROVIDER,
    SaverState,
    SaverSteps,
    WritesBody,
    any_body,
    bound,
    checkpoint_envelope,
    claim_key,
    configurable,
    encode_body,
    is_checkpoint,
    parts,
    question_key,
    segment,
    thread_of,
    thread_prefix,
    writes_body,
    writes_prefix,
)

__all__ = ["copy_thread", "delete_for_runs", "delete_thread", "prune", "put", "put_writes"]


def put(
    saver: SaverState, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
) -> Plan[RunnableConfig]:
    """Seal and save `checkpoint` (one frame); the config that names it."""
    key, env, stored = checkpoint_envelope(saver, config, checkpoint, metadata)
    yield from step(SaverSteps.save, key, env)
    return stored


def put_writes(
    saver: SaverState, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
) -> Plan[None]:
    """Seal and save one task's pending writes (one frame per task, merged as LangGraph's savers merge)."""
    conf = configurable(config)
    thread = thread_of(config)
    ns = str(conf.get("checkpoint_ns") or "")
    cid = str(conf["checkpoint_id"])
    key = writes_prefix(saver, thread, ns, cid) + segment(str(task_id))
    new: dict[int, tuple[int, str, str, bytes]] = {}
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        vtype, vdata = saver.serde.dumps_typed(value)
        new[idx] = (idx, channel, vtype, vdata)
    head = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid, "task_id": str(task_id)}
    condition: dict[str, Any] = {"if_absent": True}
    merged = dict(new)
    while True:
        body = WritesBody(thread, ns, cid, str(task_id), task_path, sorted(merged.values(), key=lambda w: w[0]))
        env = Envelope(
            provider=PROVIDER, provider_state=encode_body(body), content_type=CONTENT_TYPE, reason="pending writes"
        )
        try:
            yield from step(SaverSteps.save, key, env, **condition)
        except TokenMismatch:
            pass
        else:
            yield from _ask(saver, thread, ns, cid, str(task_id), writes)
            return None
        parked = yield from step(SaverSteps.load, key)
        if parked is None:
            condition, merged = {"if_absent": True}, dict(new)
            continue
        old = bound(saver, key, parked, head, writes_body)
        # as LangGraph's own savers: a regular write already stored stays; special channels are replaced
        merged = {w[0]: w for w in old.writes}
        for idx, write in new.items():
            if idx < 0 or idx not in merged:
                merged[idx] = write
        condition = {"if_match": parked.token}


def _ask(saver: SaverState, thread: str, ns: str, cid: str, task: str, writes: Sequence[tuple[str, Any]]) -> Plan[None]:
    """Park each interrupt among `writes` as a berth question (`berth questions`, the inbox).

    One question per interrupt, keyed and identified by the interrupt's id, so parallel
    branches that each interrupt ask one question each, and an answer names its interrupt.
    """
    for channel, value in writes:
        if channel != INTERRUPT:
            continue
        for i, item in enumerate(value if isinstance(value, (list, tuple)) else [value], 1):
            interrupt_id = str(getattr(item, "id", "") or f"{task}-{i}")
            claimed = yield from step(SaverSteps.exists, claim_key(saver, thread, ns, cid, interrupt_id))
            if claimed:  # raised again by a branch re-run while its own resume waits its turn
                continue
            key = question_key(saver, thread, ns, cid, interrupt_id)
            yield from step(SaverSteps.ask, key, item, saver.now() + saver.default_deadline, interrupt_id)
    return None


def delete_thread(saver: SaverState, thread_id: str) -> Plan[None]:
    """Delete every checkpoint and pending write of the thread."""
    yield from step(SaverSteps.delete_prefix, thread_prefix(saver, str(thread_id)))
    return None


def _delete_checkpoints(rows: Sequence[Listing]) -> Plan[None]:
    for row in rows:
        yield from step(SaverSteps.delete, row.key, row.token)
        yield from step(SaverSteps.delete_prefix, row.key + "/")  # its writes
    return None


def delete_for_runs(saver: SaverState, run_ids: Sequence[str]) -> Plan[None]:
    """Delete the checkpoints (and their writes) whose metadata names one of `run_ids`."""
    wanted = {str(r) for r in run_ids}
    if not wanted:
        return None
    rows = yield from step(SaverSteps.heads, saver.prefix)
    doomed = [row for row in rows if is_checkpoint(saver, row.key) and row.run_id in wanted]
    yield from _delete_checkpoints(doomed)
    return None


def copy_thread(saver: SaverState, source: str, target: str) -> Plan[None]:
    """Copy every checkpoint and pending write of one thread to another (resealed, bound to the target)."""
    # checkpoints and their writes only: resume claims, run leases and questions belong to the
    # source's interrupts (a claim past its deadline would raise Expired on load)
    listed = yield from step(SaverSteps.heads, thread_prefix(saver, str(source)))
    rows = [row for row in listed if parts(saver, row.key).kind == "c"]
    dest = thread_prefix(saver, str(target))
    for start in range(0, len(rows), PAGE):
        keys = [row.key for row in rows[start : start + PAGE]]
        loaded = yield from step(SaverSteps.load_many, keys)
        for key, parked in zip(keys, loaded, strict=True):
            if parked is None:
                continue
            body = bound(saver, key, parked, {"thread_id": str(source)}, any_body)
            body["thread_id"] = str(target)
            # in the format it was read in: a JSON body (written before binary state) holds base64 text
            binary = parked.envelope.content_type is not None
            state = encode_body(body) if binary else orjson.dumps(body)
            env = parked.envelope.replace(provider_state=state, created_at=None)
            yield from step(SaverSteps.save, dest + key[len(thread_prefix(saver, str(source))) :], env)
    return None


def prune(saver: SaverState, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
    """`keep_latest`: keep each namespace's newest checkpoint (and its writes); `delete`: delete the threads."""
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
    for thread in thread_ids:
        if strategy == "delete":
            yield from delete_thread(saver, thread)
            continue
        rows = yield from step(SaverSteps.heads, thread_prefix(saver, str(thread)))
        latest: dict[str, Listing] = {}
        for row in rows:
            split = parts(saver, row.key)
            if is_checkpoint(saver, row.key) and (
                split.ns not in latest or split.cid > parts(saver, latest[split.ns].key).cid
            ):
                latest[split.ns] = row
        keep = {row.key for row in latest.values()}
        yield from _delete_checkpoints([row for row in rows if is_checkpoint(saver, row.key) and row.key not in keep])
    return None
