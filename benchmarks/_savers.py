"""Workload 9: berth's LangGraph savers beside LangGraph's own, on SQLite and PostgreSQL, sync and async.

The same checkpoints (a 2 KiB message list and a step counter, each checkpoint a new
channel version, one task's pending writes each) are written through each saver's
own `put` + `put_writes` into a thread of 100 and one of 10,000 checkpoints (quick
mode: 100 and 1,000). Then, interleaved trial by trial, each contender does:

- `get_tuple` of the thread's latest checkpoint (with its pending writes);
- `list(config, limit=10)`: the newest page of the thread's history;
- one graph step: `put` of a new checkpoint and `put_writes` of its task's writes.

Contenders: `BerthSaver` / `AsyncBerthSaver` over a store sealed with AES-256-GCM;
LangGraph's `SqliteSaver` / `AsyncSqliteSaver` and `PostgresSaver` /
`AsyncPostgresSaver`, unencrypted and with its `EncryptedSerializer` (AES-GCM, and
its default EAX). The async faces run each call to completion on one event loop.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

from _common import Variant, chat_messages, interleave
from _cycle import langgraph_serdes, sealer

import berth
import berth.aio

BERTH = "berth sealed"
FACES = ("sync", "async")
SIZES_FULL = (100, 10_000)
SIZES_QUICK = (100, 1_000)
OPS = ("get_tuple", "list10", "step")


def _thread(size: int) -> str:
    return f"thread-{size}"


def _checkpoint(step: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint: Any = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": messages, "step": step}
    checkpoint["channel_versions"] = {"messages": step + 1, "step": step + 1}
    return dict(checkpoint)


def _step(saver: Any, thread: str, parent: str | None, step: int, messages: list[dict[str, Any]]) -> str:
    """One graph step through the sync face: put a checkpoint, then its task's writes; the new checkpoint id."""
    conf: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent
    checkpoint = _checkpoint(step, messages)
    stored = saver.put(conf, checkpoint, {"source": "loop", "step": step}, checkpoint["channel_versions"])
    saver.put_writes(stored, [("messages", messages[:1]), ("step", step)], f"task-{step}")
    return str(stored["configurable"]["checkpoint_id"])


async def _astep(saver: Any, thread: str, parent: str | None, step: int, messages: list[dict[str, Any]]) -> str:
    conf: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent
    checkpoint = _checkpoint(step, messages)
    stored = await saver.aput(conf, checkpoint, {"source": "loop", "step": step}, checkpoint["channel_versions"])
    await saver.aput_writes(stored, [("messages", messages[:1]), ("step", step)], f"task-{step}")
    return str(stored["configurable"]["checkpoint_id"])


class Contender:
    """One saver kind on one backend: its sync saver, its async saver (on `loop`), and how to close them."""

    def __init__(self, name: str, role: str, sync: Any, make_async: Callable[[], Any], close: Callable[[], None]):
        self.name, self.role, self.sync = name, role, sync
        self.loop = asyncio.new_event_loop()
        self.async_, self._aclose = self.loop.run_until_complete(make_async())
        self._close = close

    def close(self) -> None:
        self.loop.run_until_complete(self._aclose())
        self.loop.close()
        self._close()


def berth_contender(backend: str, ctx: dict[str, Any], tag: str) -> Contender:
    url = f"sqlite:///{ctx['dir']}/{tag}-berth.db" if backend == "sqlite" else f"{ctx['postgres']}?schema={tag}_berth"
    store = berth.open_store(url, identity="bench-lg", sealer=sealer())
    from berth.langgraph import AsyncBerthSaver, BerthSaver

    async def make_async() -> Any:
        astore = berth.aio.open_store(url, identity="bench-lg", sealer=sealer())
        return AsyncBerthSaver(astore), astore.aclose

    return Contender(BERTH, "berth", BerthSaver(store), make_async, store.close)


def langgraph_contender(backend: str, ctx: dict[str, Any], tag: str, name: str, serde: Callable[[], Any]) -> Contender:
    slug = {"LangGraph unencrypted": "plain", "LangGraph EncryptedSerializer GCM": "gcm"}.get(name, "eax")
    if backend == "sqlite":
        import aiosqlite
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = f"{ctx['dir']}/{tag}-{slug}.db"
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn, serde=serde())
        saver.setup()

        async def make_async() -> Any:
            aconn = await aiosqlite.connect(path, timeout=30)
            await aconn.execute("PRAGMA synchronous=FULL")
            return AsyncSqliteSaver(aconn, serde=serde()), aconn.close

        return Contender(name, "peer", saver, make_async, conn.close)
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection, Connection
    from psycopg.rows import dict_row

    schema = f"{tag}_{slug}"
    with Connection.connect(ctx["postgres"], autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "options": f"-c search_path={schema}",
    }
    pg = Connection.connect(ctx["postgres"], **kwargs)
    pg_saver = PostgresSaver(pg, serde=serde())
    pg_saver.setup()

    async def make_pg_async() -> Any:
        aconn = await AsyncConnection.connect(ctx["postgres"], **kwargs)
        return AsyncPostgresSaver(aconn, serde=serde()), aconn.close

    return Contender(name, "peer", pg_saver, make_pg_async, pg.close)


def contenders(backend: str, ctx: dict[str, Any], tag: str) -> list[Contender]:
    out = [berth_contender(backend, ctx, tag)]
    out += [langgraph_contender(backend, ctx, tag, name, make) for name, make in langgraph_serdes().items()]
    return out


def populate(c: Contender, sizes: tuple[int, ...], messages: list[dict[str, Any]]) -> dict[int, float]:
    """Write each thread's checkpoints through the contender's own sync saver; seconds per thread."""
    took = {}
    for size in sizes:
        t0 = time.perf_counter()
        parent = None
        for step in range(size):
            parent = _step(c.sync, _thread(size), parent, step, messages)
        took[size] = time.perf_counter() - t0
    return took


def _variants(cs: list[Contender], face: str, op: str, size: int, messages: list[dict[str, Any]]) -> list[Variant]:
    out = []
    for c in cs:
        config = {"configurable": {"thread_id": _thread(size), "checkpoint_ns": ""}}
        if op == "step":
            state: dict[str, Any] = {"parent": None, "step": 0, "thread": f"step-{face}-{uuid.uuid4().hex[:8]}"}

            if face == "sync":

                def fn(c: Contender = c, state: dict[str, Any] = state) -> None:
                    state["parent"] = _step(c.sync, state["thread"], state["parent"], state["step"], messages)
                    state["step"] += 1
            else:

                def fn(c: Contender = c, state: dict[str, Any] = state) -> None:
                    coro = _astep(c.async_, state["thread"], state["parent"], state["step"], messages)
                    state["parent"] = c.loop.run_until_complete(coro)
                    state["step"] += 1
        elif op == "get_tuple":
            if face == "sync":

                def fn(c: Contender = c, config: Any = config) -> None:
                    assert c.sync.get_tuple(config).pending_writes

            else:

                def fn(c: Contender = c, config: Any = config) -> None:
                    assert c.loop.run_until_complete(c.async_.aget_tuple(config)).pending_writes
        else:
            if face == "sync":

                def fn(c: Contender = c, config: Any = config) -> None:
                    assert len(list(c.sync.list(config, limit=10))) == 10

            else:

                async def page(c: Contender, config: Any) -> int:
                    return len([t async for t in c.async_.alist(config, limit=10)])

                def fn(c: Contender = c, config: Any = config) -> None:
                    assert c.loop.run_until_complete(page(c, config)) == 10

        out.append(Variant(c.name, fn, c.role))
    return out


def run(backends: list[str], ctx: dict[str, Any], *, quick: bool, trials: int, budget: float) -> dict[str, Any]:
    """Populate, then interleave every contender per (backend, face, operation, size)."""
    sizes = SIZES_QUICK if quick else SIZES_FULL
    messages = chat_messages(2048)
    out: dict[str, Any] = {"sizes": list(sizes), "load": {}, "backends": {}}
    for backend in backends:
        tag = f"lgsaver_{backend}_{uuid.uuid4().hex[:6]}"
        try:
            out["backends"][backend] = _backend(backend, ctx, tag, sizes, messages, trials, budget)
        except Exception as exc:  # one backend failing (a server gone) keeps the other's figures
            out.setdefault("failed", {})[backend] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def _backend(
    backend: str,
    ctx: dict[str, Any],
    tag: str,
    sizes: tuple[int, ...],
    messages: list[dict[str, Any]],
    trials: int,
    budget: float,
) -> dict[str, Any]:
    """Populate one backend's threads through every contender, then interleave each operation."""
    cs = contenders(backend, ctx, tag)
    try:
        rows: dict[str, Any] = {"populate_s": {c.name: populate(c, sizes, messages) for c in cs}}
        for face in FACES:
            for op in OPS:
                for size in sizes if op != "step" else (sizes[0],):
                    load = os.getloadavg()[0]
                    results = interleave(_variants(cs, face, op, size, messages), trials=trials, budget=budget)
                    key = f"{face}/{op}" + (f"/{size}" if op != "step" else "")
                    rows[key] = {n: {"role": r.role, "rates": r.rates, "cpu": r.cpu} for n, r in results.items()}
                    rows[key]["_load"] = load
    finally:
        for c in cs:
            try:
                c.close()
            except Exception:  # a connection already lost: nothing left to close
                pass
        if backend == "postgres":
            import psycopg

            with psycopg.connect(ctx["postgres"], autocommit=True) as admin:
                for schema in ("berth", "plain", "gcm", "eax"):
                    admin.execute(f'DROP SCHEMA IF EXISTS "{tag}_{schema}" CASCADE')
    return rows
