"""The savers' reads, as plans over the role `SaverSteps`: the latest checkpoint, one by id, and pages of history.

A checkpoint's writes (`c/<id>/<task>`) sort right after it, so one newest-first ordered load of
``c/`` (`Store.load_prefix(..., limit=n, reverse=True)`) meets each checkpoint's writes just before
the checkpoint itself: the latest checkpoint with its writes, or a page of history with theirs, is
one bounded read of whole frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_id

from berth._plan import Plan, step
from berth._store import Listing, Parked
from berth.langgraph._frames import (
    PAGE,
    Loaded,
    SaverState,
    SaverSteps,
    checkpoint_key,
    configurable,
    ns_prefix,
    parts,
    segment,
    thread_of,
    thread_prefix,
    tuples,
)

__all__ = ["get_tuple", "list_tuples"]


def get_tuple(saver: SaverState, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
    """The checkpoint `config` names, or the latest of its thread and namespace; `None` if there is none."""
    thread = thread_of(config)
    conf = config["configurable"]  # thread_of found it
    ns = str(conf.get("checkpoint_ns") or "")
    cid = conf.get("checkpoint_id")
    want = {"thread_id": thread, "checkpoint_ns": ns}
    if cid:
        want["checkpoint_id"] = str(cid)
        found = yield from _at(checkpoint_key(saver, thread, ns, str(cid)))
    else:
        # the latest checkpoint and its writes in one ordered load; each frame's seal binds it
        # to its key, and its body names the thread, namespace and checkpoint id again (checked)
        found = yield from _newest(f"{ns_prefix(saver, thread, ns)}c/", 1)
    found_tuples = tuples(saver, found, want, None, 1)
    return found_tuples[0] if found_tuples else None


def list_tuples(
    saver: SaverState,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Plan[list[CheckpointTuple]]:
    """Checkpoints newest first: of `config`'s thread (and namespace when it names one), or of all threads."""
    conf = configurable(config) if config else {}
    thread = conf.get("thread_id")
    ns = conf.get("checkpoint_ns")
    only = conf.get("checkpoint_id")
    before_id = get_checkpoint_id(before) if before else None
    if limit is not None and limit <= 0:
        return []
    if thread is None:
        return (yield from _list_everything(saver, filter, only, before_id, limit))
    thread = str(thread)
    want = {"thread_id": thread}
    if ns is not None:
        want["checkpoint_ns"] = str(ns)
        spaces = [ns_prefix(saver, thread, str(ns))]
    else:
        spaces = yield from _namespaces(thread_prefix(saver, thread))
    out: list[CheckpointTuple] = []
    for space in spaces:  # each namespace's newest matches, then the newest of them all
        prefix = f"{space}c/"
        bound = None if before_id is None else prefix + segment(str(before_id))
        if only is not None:
            key = prefix + segment(str(only))
            found = [] if bound is not None and key >= bound else (yield from _at(key))
            out += tuples(saver, found, want, filter, limit)
            continue
        out += yield from _matching(saver, prefix, want, filter, limit, bound)
    if len(spaces) > 1:
        out.sort(key=lambda t: str(t.config["configurable"]["checkpoint_id"]), reverse=True)
    return out if limit is None else out[:limit]


def _newest(prefix: str, count: int, before: str | None = None) -> Plan[list[Loaded]]:
    """The newest `count` checkpoints under one namespace's `c/` (keys before `before`), with their writes.

    A checkpoint's writes (`c/<id>/<task>`) sort after it, so newest first they come just
    before it: one ordered load of two frames per checkpoint (it and one task's writes) to
    start with, more only while it has not reached the `count`-th checkpoint. With `before`
    it starts there: one bounded query however long the history behind it.
    """
    size = 2 * count
    while True:
        rows = yield from step(SaverSteps.frames, prefix, size, True, before)
        out: list[Loaded] = []
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
            yield from step(SaverSteps.unseen, prefix, after, frozenset(key for key, _ in rows), before)
            return out
        size *= 4


def _at(key: str) -> Plan[list[Loaded]]:
    """The checkpoint at `key` with its writes, opened: [] when there is none."""
    parked = yield from step(SaverSteps.load, key)
    if parked is None:
        return []
    writes = yield from step(SaverSteps.frames, key + "/")
    yield from step(SaverSteps.unseen, key + "/", "", frozenset(k for k, _ in writes))
    return [(key, parked, writes)]


def _matching(
    saver: SaverState,
    prefix: str,
    want: dict[str, str],
    filter: dict[str, Any] | None,
    limit: int | None,
    before: str | None,
) -> Plan[list[CheckpointTuple]]:
    """One namespace's checkpoints newest first, before `before`, that match `filter`: the first `limit`.

    A page at a time from where the last one ended: the page `list(limit=n, before=...)` asks
    for costs one bounded load whatever the length of the history (more only while `filter`
    passes over checkpoints).
    """
    out: list[CheckpointTuple] = []
    while True:
        count = PAGE if limit is None else limit - len(out)
        found = yield from _newest(prefix, count, before)
        out += tuples(saver, found, want, filter, None if limit is None else limit - len(out))
        if len(found) < count or (limit is not None and len(out) >= limit):
            return out
        before = found[-1][0]


def _namespaces(base: str) -> Plan[list[str]]:
    """The key prefixes (`<thread>/<ns>/`) of the namespaces of the thread at `base`: one bounded look each.

    From the last key down: the namespace of the last key before the previous namespace's
    first possible key, until there is none.
    """
    spaces: list[str] = []
    before: str | None = None
    while True:
        key = yield from step(SaverSteps.last_key, base, before)
        if key is None:
            return spaces
        before = f"{base}{key[len(base) :].split('/', 1)[0]}/"
        spaces.append(before)


def _list_everything(
    saver: SaverState, filter: dict[str, Any] | None, only: Any, before_id: Any, limit: int | None
) -> Plan[list[CheckpointTuple]]:
    """`list` with no thread: every checkpoint under the prefix, from one listing of their keys."""
    prefix = saver.prefix
    rows = yield from step(SaverSteps.heads, prefix, None, True)
    yield from step(SaverSteps.unseen, prefix, "", frozenset(row.key for row in rows))
    candidates = _checkpoints(saver, rows, only, before_id)
    out: list[CheckpointTuple] = []
    page = PAGE if limit is None else min(PAGE, limit)
    for start in range(0, len(candidates), page):
        chunk = candidates[start : start + page]
        # each checkpoint of the page and all their writes in one batched load
        loaded = yield from step(SaverSteps.load_many, [k for key, wkeys in chunk for k in (key, *wkeys)])
        found: list[Loaded] = []
        at = 0
        for key, wkeys in chunk:
            found.append((key, loaded[at], list(zip(wkeys, loaded[at + 1 : at + 1 + len(wkeys)], strict=True))))
            at += 1 + len(wkeys)
        out += tuples(saver, found, {}, filter, None if limit is None else limit - len(out))
        if limit is not None and len(out) >= limit:
            return out
    return out


def _checkpoints(saver: SaverState, rows: Sequence[Listing], only: Any, before_id: Any) -> list[tuple[str, list[str]]]:
    """The checkpoints among `rows` (newest first, across namespaces and threads), each with its write keys."""
    writes: dict[str, list[str]] = {}
    candidates = []
    for row in rows:
        split = parts(saver, row.key)
        if split.kind != "c":
            continue
        if split.task:
            writes.setdefault(row.key.rsplit("/", 1)[0], []).append(row.key)
            continue
        if only is not None and split.cid != segment(str(only)):
            continue
        if before_id is not None and split.cid >= segment(str(before_id)):
            continue
        candidates.append((split.cid, row.key))
    candidates.sort(key=lambda item: item[0], reverse=True)
    return [(key, writes.get(key, [])) for _, key in candidates]
