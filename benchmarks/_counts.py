"""Durable writes and round trips per cycle: berth next to its floor, counted rather than timed.

- fsyncs (fsync + fdatasync) and socket sends (sendto + sendmsg): `strace -f -c`
  on a fresh process that runs N cycles, minus one that runs 0 (setup cancels);
- SQLite statements: the connection's trace callback;
- PostgreSQL commits and rows written: `pg_stat_database` of the suite's own database;
- Redis commands: `INFO commandstats` of the suite's private server (Redis Cluster: summed over its
  three private primaries);
- S3, GCS, DynamoDB and Azure Blob requests: every urllib3 request the client library sends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import chat_messages, worker_command, worker_result

_HTTP = ("s3", "gcs", "dynamodb", "azblob")  # clients on urllib3: their requests are counted
ROLES = {
    "berth": "berth sealed",
    "floor": "floor (raw client)",
    "peer": "LangGraph unencrypted",
    "witness": "berth sealed + witness",
}


def _variant(backend: str, role: str, ctx: dict[str, Any]) -> Any:
    from _cycle import (
        berth_url,
        berth_variant,
        floor_variant,
        langgraph_postgres_variants,
        langgraph_sqlite_variants,
        make_floor,
    )

    messages = chat_messages()
    tag = "count"
    if role == "berth":
        url, options = berth_url(backend, ctx, tag)
        return berth_variant(url, messages, **options)
    if role == "floor":
        return floor_variant(make_floor(backend, ctx, tag), messages)
    if role == "witness":
        from _witness import witnessed_variant

        return witnessed_variant(backend, ctx, messages, tag)
    if backend == "sqlite":
        return langgraph_sqlite_variants(f"{ctx['dir']}/{tag}.db", messages, only=ROLES["peer"])[0]
    return langgraph_postgres_variants(ctx["postgres"], messages, only=ROLES["peer"])[0]


def count_job(args: dict[str, Any]) -> dict[str, Any]:
    """In the worker: run `n` cycles after 3 warm-up ones, counting what the client can see."""
    backend, role, n = args["backend"], args["role"], args["n"]
    variant = _variant(backend, role, args["ctx"])
    for _ in range(3):
        variant.op()
    counters: dict[str, int] = {}
    trace_statements = backend == "sqlite" and role != "witness"  # a witness has a connection of its own
    if trace_statements:
        handle = variant.handle
        conn = handle.backend._conn() if role == "berth" else handle.conn
        statements = [0]

        def trace(sql: str) -> None:
            statements[0] += 1

        conn.set_trace_callback(trace)
    if backend in _HTTP:
        import urllib3.connectionpool

        requests = [0]
        original = urllib3.connectionpool.HTTPConnectionPool.urlopen

        def urlopen(self: Any, *a: Any, **k: Any) -> Any:
            requests[0] += 1
            return original(self, *a, **k)

        urllib3.connectionpool.HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign]
    for _ in range(n):
        variant.op()
    if trace_statements:
        conn.set_trace_callback(None)
        counters["statements"] = statements[0]
    if backend in _HTTP:
        counters["requests"] = requests[0]
    if variant.teardown:
        variant.teardown()
    return counters


def _strace_counts(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m:
            out[m.group(2)] = int(m.group(1))
    return out


def _server_counters(backend: str, ctx: dict[str, Any]) -> dict[str, int]:
    if backend == "postgres":
        import psycopg

        time.sleep(1.2)  # backends flush their statistics at most once a second, and at exit
        with psycopg.connect(ctx["postgres"], autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database "
                "WHERE datname = current_database()"
            ).fetchone()
        assert row is not None
        return {"commits": int(row[0]), "rows written": int(row[1])}
    if backend in ("redis", "redis-cluster"):
        import redis

        if backend == "redis":
            urls = [ctx["redis"]]
        else:  # redis+cluster://host:port,host:port,.../ : every primary's own counters
            urls = [f"redis://{h}" for h in ctx["redis_cluster"].partition("://")[2].partition("/")[0].split(",")]
        writes = ("cmdstat_set", "cmdstat_incr", "cmdstat_del", "cmdstat_unlink", "cmdstat_setrange")
        out = {"commands": 0, "write commands (AOF records)": 0}
        for url in urls:
            client = redis.Redis.from_url(url)
            stats = client.info("commandstats")
            client.close()
            out["commands"] += sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
            out["write commands (AOF records)"] += sum(int(stats[k]["calls"]) for k in writes if k in stats)
        return out
    return {}


def _run(backend: str, role: str, n: int, ctx: dict[str, Any], strace: str | None) -> dict[str, int]:
    before = _server_counters(backend, ctx)
    cmd = worker_command("count", {"backend": backend, "role": role, "n": n, "ctx": ctx})
    trace_file = None
    if strace:
        fd, trace_file = tempfile.mkstemp(prefix="berth-bench-strace-")
        os.close(fd)
        cmd = [strace, "-f", "-c", "-e", "trace=fsync,fdatasync,sendto,sendmsg", "-o", trace_file, *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    counters: dict[str, int] = worker_result(
        proc.stdout, proc.stderr, proc.returncode, f"count worker for {backend}/{role}"
    )
    if trace_file:
        sys_counts = _strace_counts(trace_file)
        os.unlink(trace_file)
        counters["fsyncs"] = sys_counts.get("fsync", 0) + sys_counts.get("fdatasync", 0)
        counters["socket sends"] = sys_counts.get("sendto", 0) + sys_counts.get("sendmsg", 0)
    after = _server_counters(backend, ctx)
    for k, v in after.items():
        counters[k] = v - before[k]
    return counters


def count(backend: str, role: str, ctx: dict[str, Any], n: int = 40) -> dict[str, float]:
    """Per-cycle counts for one contender: a run of `n` cycles minus a run of none."""
    strace = shutil.which("strace")
    _run(backend, role, 0, ctx, None)  # creates tables, schemas, files: setup the next two runs share
    base = _run(backend, role, 0, ctx, strace)
    full = _run(backend, role, n, ctx, strace)
    out: dict[str, float] = {}
    for k, v in full.items():
        if k in ("statements", "requests"):
            out[k] = v / n  # counted around the cycles only
        else:
            out[k] = (v - base.get(k, 0)) / n
    if backend not in ("file", "sqlite"):
        out.pop("fsyncs", None)  # the server's disk, not this process, does the durable write
    if backend in ("file", "sqlite", "") or not strace:
        out.pop("socket sends", None)
    return out
