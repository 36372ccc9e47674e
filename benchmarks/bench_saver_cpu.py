"""Where a LangGraph saver read spends its CPU: BerthSaver beside SqliteSaver, in a hot loop.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_saver_cpu.py [--checkpoints 100] [--profile get_tuple]
        [--async] [--berth-url postgresql://127.0.0.1:5432/test] [--peer-url postgresql://127.0.0.1:5432/test]

One SQLite file each, the same thread of checkpoints written through each saver (the
2 KiB message list of `benchmarks/_savers.py`); then, per operation, the best of five
runs of CPU time (`time.process_time`) per call, and the ratio of the best wall times:
`get_tuple` (latest), `list(limit=10)`,
the page of history `get_state_history(before=...)` reads from the middle of the thread
(`list(limit=10, before=<the middle checkpoint>)`: `list10_before`), the same page with a
metadata `filter` (`list10_filter`) and without `checkpoint_ns` (`list10_any_ns`), and a
graph step (put + put_writes). Steadier than section 10's wall-clock rates on a shared
machine, and the place to start a profile (`--profile OP`: cProfile of BerthSaver).
Run it at `--checkpoints 100` and `--checkpoints 10000` to see whether a page's cost
depends on the thread's length. `--async`: `AsyncBerthSaver` beside `AsyncSqliteSaver`, each
operation awaited in one event loop (CPU of every thread: aiosqlite's and berth's workers count).
`--berth-url`: berth's store elsewhere (PostgreSQL, say; its server's CPU is not counted), still
beside LangGraph's SQLite saver unless `--peer-url` puts LangGraph's saver on PostgreSQL too
(`PostgresSaver` / `AsyncPostgresSaver` in a schema of their own, emptied first): the like-for-like row.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import chat_messages
from _cycle import sealer
from _savers import _astep, _step

import berth
import berth.aio
from berth.langgraph import AsyncBerthSaver, BerthSaver

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _ops(messages: list[dict[str, Any]], middle: dict[int, str]) -> dict[str, Callable[[Any], None]]:
    steps: dict[int, tuple[str | None, int]] = {}

    def get_tuple(saver: Any) -> None:
        assert saver.get_tuple(CONFIG).pending_writes

    def list10(saver: Any) -> None:
        assert len(list(saver.list(CONFIG, limit=10))) == 10

    def before(saver: Any) -> dict[str, Any]:
        return {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": middle[id(saver)]}}

    def list10_before(saver: Any) -> None:
        assert len(list(saver.list(CONFIG, limit=10, before=before(saver)))) == 10

    def list10_filter(saver: Any) -> None:
        assert len(list(saver.list(CONFIG, limit=10, before=before(saver), filter={"source": "loop"}))) == 10

    def list10_any_ns(saver: Any) -> None:
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}, limit=10, before=before(saver)))) == 10

    def step(saver: Any) -> None:
        parent, n = steps.get(id(saver), (None, 0))
        steps[id(saver)] = (_step(saver, f"step-{id(saver)}", parent, n, messages), n + 1)

    return {
        "get_tuple": get_tuple,
        "list10": list10,
        "list10_before": list10_before,
        "list10_filter": list10_filter,
        "list10_any_ns": list10_any_ns,
        "step": step,
    }


def _aops(messages: list[dict[str, Any]], middle: dict[int, str]) -> dict[str, Callable[[Any], Awaitable[None]]]:
    """`_ops`, awaited through the async savers."""
    steps: dict[int, tuple[str | None, int]] = {}

    def before(saver: Any) -> dict[str, Any]:
        return {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": middle[id(saver)]}}

    async def get_tuple(saver: Any) -> None:
        assert (await saver.aget_tuple(CONFIG)).pending_writes

    async def list10(saver: Any) -> None:
        assert len([t async for t in saver.alist(CONFIG, limit=10)]) == 10

    async def list10_before(saver: Any) -> None:
        assert len([t async for t in saver.alist(CONFIG, limit=10, before=before(saver))]) == 10

    async def step(saver: Any) -> None:
        parent, n = steps.get(id(saver), (None, 0))
        steps[id(saver)] = (await _astep(saver, f"step-{id(saver)}", parent, n, messages), n + 1)

    return {"get_tuple": get_tuple, "list10": list10, "list10_before": list10_before, "step": step}


async def _amain(args: argparse.Namespace, directory: str, url: str) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    messages = chat_messages(2048)
    async with berth.aio.open_store(url, identity="bench-lg", sealer=sealer()) as store:
        conn: Any
        if args.peer_url:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            from psycopg import AsyncConnection

            conn = await AsyncConnection.connect(args.peer_url, **_pg_peer_options(args.peer_url))
            peer: Any = AsyncPostgresSaver(conn)
        else:
            conn = await aiosqlite.connect(f"{directory}/langgraph.db")
            await conn.execute("PRAGMA journal_mode=WAL")
            peer = AsyncSqliteSaver(conn)
        await peer.setup()
        savers = {"berth sealed": AsyncBerthSaver(store), "LangGraph unencrypted": peer}
        if url.startswith("postgresql"):
            await store.delete_prefix("langgraph/")
        middle: dict[int, str] = {}
        for saver in savers.values():
            parent = None
            for n in range(args.checkpoints):
                parent = await _astep(saver, "t", parent, n, messages)
                if n == args.checkpoints // 2:
                    middle[id(saver)] = parent
        for op, fn in _aops(messages, middle).items():
            if args.only and op not in args.only:
                continue
            calls = args.calls if not op.startswith("list10") else max(1, args.calls // 5)
            cpu, wall = {}, {}
            for name, saver in savers.items():
                await fn(saver)
                runs, walls = [], []
                for _ in range(5):
                    t0, w0 = time.process_time(), time.perf_counter()
                    for _ in range(calls):
                        await fn(saver)
                    runs.append((time.process_time() - t0) / calls)
                    walls.append((time.perf_counter() - w0) / calls)
                cpu[name], wall[name] = min(runs), min(walls)
            _row(f"a{op}", cpu, wall)
        await conn.close()


def _pg_peer_options(url: str) -> dict[str, Any]:
    """LangGraph's PostgreSQL saver's connection options, in a schema of its own, emptied first."""
    from psycopg import Connection
    from psycopg.rows import dict_row

    with Connection.connect(url, autocommit=True) as admin:
        admin.execute('DROP SCHEMA IF EXISTS "bench_saver_cpu" CASCADE')
        admin.execute('CREATE SCHEMA "bench_saver_cpu"')
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "options": "-c search_path=bench_saver_cpu",
    }


def _row(op: str, cpu: dict[str, float], wall: dict[str, float]) -> None:
    berth_us, peer_us = cpu["berth sealed"] * 1e6, cpu["LangGraph unencrypted"] * 1e6
    ratio = wall["berth sealed"] / wall["LangGraph unencrypted"]
    print(
        f"{op:10s} berth {berth_us:7.1f} µs   LangGraph {peer_us:7.1f} µs   "
        f"CPU × {berth_us / peer_us:.2f}   wall × {ratio:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--profile", choices=["get_tuple", "list10", "list10_before", "step"])
    parser.add_argument("--only", nargs="+", help="these operations only")
    parser.add_argument("--async", dest="aio", action="store_true", help="the async savers, awaited")
    parser.add_argument("--berth-url", help="berth's store URL (default: an SQLite file beside LangGraph's)")
    parser.add_argument("--peer-url", help="LangGraph's saver on this PostgreSQL database (default: an SQLite file)")
    args = parser.parse_args()
    from langgraph.checkpoint.sqlite import SqliteSaver

    directory = tempfile.mkdtemp(prefix="berth-saver-cpu-")
    url = args.berth_url or f"sqlite:///{directory}/berth.db"
    if args.aio:
        asyncio.run(_amain(args, directory, url))
        return
    messages = chat_messages(2048)
    store = berth.open_store(url, identity="bench-lg", sealer=sealer())
    if url.startswith("postgresql"):
        store.delete_prefix("langgraph/")
    conn: Any
    if args.peer_url:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection

        conn = Connection.connect(args.peer_url, **_pg_peer_options(args.peer_url))
        peer: Any = PostgresSaver(conn)
    else:
        conn = sqlite3.connect(f"{directory}/langgraph.db", check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        peer = SqliteSaver(conn)
    peer.setup()
    savers = {"berth sealed": BerthSaver(store), "LangGraph unencrypted": peer}
    middle: dict[int, str] = {}
    for saver in savers.values():
        parent = None
        for n in range(args.checkpoints):
            parent = _step(saver, "t", parent, n, messages)
            if n == args.checkpoints // 2:
                middle[id(saver)] = parent
    for op, fn in _ops(messages, middle).items():
        if args.only and op not in args.only:
            continue
        calls = args.calls if not op.startswith("list10") else max(1, args.calls // 5)
        cpu, wall = {}, {}
        for name, saver in savers.items():
            fn(saver)
            runs, walls = [], []
            for _ in range(5):
                t0, w0 = time.process_time(), time.perf_counter()
                for _ in range(calls):
                    fn(saver)
                runs.append((time.process_time() - t0) / calls)
                walls.append((time.perf_counter() - w0) / calls)
            cpu[name], wall[name] = min(runs), min(walls)
        _row(op, cpu, wall)
    if args.profile:
        fn, saver = _ops(messages, middle)[args.profile], savers["berth sealed"]
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            fn(saver)
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(40)
    store.close()
    conn.close()


if __name__ == "__main__":
    main()
