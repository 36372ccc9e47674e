"""Workload 8: interrupted LangGraph threads, 4 processes racing to resume each one -- berth and LangGraph alone.

    python benchmarks/_resume_race.py --who berth --backend sqlite --threads 200      # one race, JSON out
    python benchmarks/_resume_race.py --who langgraph --backend postgres --threads 200

`threads` graphs stop on `interrupt()` (one approval node). Then 4 fresh processes,
each with its own saver and graph, are released together and walk the threads in
the same order (every resume is contended), each trying to resume every thread:

- berth: the graph's checkpointer is `BerthSaver` (AES-256-GCM) and each process
  calls `berth.langgraph.resume_once(graph, config, "approve")`;
- LangGraph alone: its own `SqliteSaver` / `PostgresSaver` (unencrypted) and each
  process calls `graph.invoke(Command(resume="approve"), config)`, as its docs show.

A resume is counted where it happens: the node's code after `interrupt()` runs and
records the thread. The parent adds up every process's records: exactly once means
every thread resumed once, none twice, none never. tests/test_langgraph.py runs
this script (20 threads by default, 200 under -m slow) and asserts it for berth.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from typing import Any, TypedDict

warnings.simplefilter("ignore")  # figures, not deprecation notices, go to stdout

PROCESSES = 4
KEY = bytes(range(32))  # the suite's fixed AES-256 key (benchmarks/_common.py): figures, not secrets
IDENTITY = "bench-resume"
POSTGRES_DSN = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


class State(TypedDict, total=False):
    action: str
    verdict: str


RESUMED: list[str] = []  # in each process: the threads whose node ran past interrupt() here


def build_graph(saver: Any) -> Any:
    """One approval node: ask, and on the answer record the resume (the side effect that must happen once)."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def approve(state: State, config: RunnableConfig) -> State:
        verdict = interrupt({"question": f"run {state['action']}?"})
        RESUMED.append(str(config["configurable"]["thread_id"]))
        return {"verdict": str(verdict)}

    builder = StateGraph(State)
    builder.add_node("approve", approve)
    builder.add_edge(START, "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=saver)


def thread_ids(count: int) -> list[str]:
    return [f"ticket-{i}" for i in range(count)]


def open_saver(who: str, backend: str, where: str) -> tuple[Any, Any]:
    """(saver, close) for `who` on `backend` at `where` (a file path, or a PostgreSQL schema)."""
    if who == "berth":
        import berth
        from berth.langgraph import BerthSaver

        sealer = berth.AesGcmSealer(berth.Keyring({"bench-1": KEY}, "bench-1"))
        url = f"sqlite:///{where}" if backend == "sqlite" else f"{POSTGRES_DSN}?schema={where}"
        store = berth.open_store(url, identity=IDENTITY, sealer=sealer)
        return BerthSaver(store), store.close
    if backend == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(where, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        saver = SqliteSaver(conn)
        saver.setup()
        return saver, conn.close
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    pg = Connection.connect(
        POSTGRES_DSN,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={where}",
    )
    pg_saver = PostgresSaver(pg)
    pg_saver.setup()
    return pg_saver, pg.close


def resumer_job(args: dict[str, Any]) -> dict[str, Any]:
    """In a worker: open a saver, say READY, wait for GO on stdin, then try to resume every thread once."""
    from langgraph.types import Command

    who, backend, where = args["who"], args["backend"], args["where"]
    saver, close = open_saver(who, backend, where)
    graph = build_graph(saver)
    if who == "berth":
        from berth.langgraph import resume_once

        def resume(config: dict[str, Any]) -> None:
            resume_once(graph, config, "approve")
    else:

        def resume(config: dict[str, Any]) -> None:
            graph.invoke(Command(resume="approve"), config)

    print("READY", flush=True)
    sys.stdin.readline()
    errors: Counter[str] = Counter()
    t0 = time.perf_counter()
    for thread in thread_ids(args["threads"]):
        try:
            resume({"configurable": {"thread_id": thread}})
        except Exception as exc:  # LangGraph alone may trip over a concurrent writer; counted, not hidden
            errors[type(exc).__name__] += 1
    wall = time.perf_counter() - t0
    close()
    return {"resumed": RESUMED, "errors": dict(errors), "wall": wall}


def park(who: str, backend: str, where: str, count: int) -> None:
    """Run `count` threads up to their interrupt."""
    saver, close = open_saver(who, backend, where)
    graph = build_graph(saver)
    for thread in thread_ids(count):
        out = graph.invoke({"action": f"deploy {thread}"}, {"configurable": {"thread_id": thread}})
        assert "__interrupt__" in out, out
    close()


def race(who: str, backend: str, count: int, scratch: str, processes: int = PROCESSES) -> dict[str, Any]:
    """One race: park `count` threads, release `processes` resumers together, count resumes per thread."""
    if backend == "sqlite":
        where = f"{scratch}/resume-{who}-{uuid.uuid4().hex[:8]}.db"
    else:
        where = f"bench_resume_{who}_{uuid.uuid4().hex[:10]}"
        if who != "berth":  # berth creates its schema; LangGraph's saver needs one to set up in
            import psycopg

            with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                admin.execute(f'CREATE SCHEMA "{where}"')
    try:
        park(who, backend, where, count)
        job = json.dumps({"who": who, "backend": backend, "where": where, "threads": count})
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--job", job],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        for proc in procs:  # every interpreter started, connected and built its graph
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "READY":
                _, err = proc.communicate(timeout=60)
                raise RuntimeError(f"resumer ({who}/{backend}) failed to start: {err.strip()[-800:]}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("GO\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=1800)
            line = next((ln[7:] for ln in out.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                raise RuntimeError(f"resumer ({who}/{backend}) failed: {err.strip()[-800:]}")
            results.append(json.loads(line))
    finally:
        if backend == "postgres":
            import psycopg

            with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA IF EXISTS "{where}" CASCADE')
    per_thread = Counter(t for r in results for t in r["resumed"])
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
    return {
        "load": os.getloadavg()[0],
        "who": who,
        "backend": backend,
        "threads": count,
        "processes": processes,
        "resumes": sum(per_thread.values()),
        "resumed_twice_or_more": sum(1 for n in per_thread.values() if n > 1),
        "never_resumed": count - len(per_thread),
        "exactly_once": len(per_thread) == count and all(n == 1 for n in per_thread.values()),
        "errors": dict(errors),
        "wall": max(r["wall"] for r in results),
    }


def run(backends: list[str], ctx: dict[str, Any], count: int, trials: int = 1) -> dict[str, Any]:
    """berth and LangGraph alone, alternating, `trials` races each per backend (for benchmarks/run.py)."""
    global POSTGRES_DSN
    if ctx.get("postgres"):
        POSTGRES_DSN = ctx["postgres"]
        os.environ["BERTH_TEST_POSTGRES"] = POSTGRES_DSN  # the resumer processes read it
    out: dict[str, Any] = {}
    for backend in backends:
        rows: dict[str, list[dict[str, Any]]] = {"berth": [], "langgraph": []}
        for trial in range(trials):
            for who in ("berth", "langgraph") if trial % 2 == 0 else ("langgraph", "berth"):
                rows[who].append(race(who, backend, count, ctx["dir"]))
        out[backend] = rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--who", choices=("berth", "langgraph"), default="berth")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--threads", type=int, default=200)
    ap.add_argument("--processes", type=int, default=PROCESSES)
    ap.add_argument("--dir", default=None, help="where SQLite files go (default: a temporary directory)")
    args = ap.parse_args()
    if args.job:
        result = resumer_job(json.loads(args.job))
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="berth-resume-", dir=args.dir) as scratch:
        print(json.dumps(race(args.who, args.backend, args.threads, scratch, args.processes)))


if __name__ == "__main__":
    main()
