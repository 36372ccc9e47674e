"""Workload 4: list and sweep 10k and 100k parked envelopes beside each raw scan; `berth ls` beside `--jsonl`.

The envelopes are parked through the public API beforehand (SQLite with
`synchronous=NORMAL`, files without fsync, PostgreSQL with
`synchronous_commit=off` and a few threads, to populate quickly); 1 in 100 is
past its deadline. Each listing, each floor scan and each sweep runs in a fresh
process that reports entries per second, its CPU time and its peak RSS growth
(the kernel's reset peak mark, as in `_large`), so a listing that held every
entry would show memory growing tenfold from 10k to 100k. Listing and floor
alternate trial by trial, and every figure carries the load average at its
start.

The floor is the raw client reading the same heads by hand, the least a listing
can do: SQLite and PostgreSQL one ordered `SELECT name, substr(data, 1, 1024),
gen, length(data)` streamed through a cursor; files one `scandir` and one
bounded read per file (unordered: file names are hashes); Redis `SCAN` plus a
redis-py pipeline of `GETRANGE` per SCAN batch (unordered). berth does more:
it orders (files and Redis), parses every header and builds a `Listing`.

`berth ls` runs as a user runs it, the installed console script on the SQLite
store, stdout to a pipe that is read and dropped: the table (`--all`, every
row), the default (100 rows, the rest counted) and `--jsonl`, interleaved,
with wall time and peak RSS per run (GNU time's, the child's own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _common import current_rss, run_worker

EXPIRED_EVERY = 100
HEAD = 1024  # bytes of each frame a floor reads, as berth's listing does
BACKENDS = ("sqlite", "postgres", "file", "redis")
LS_FORMS = {"table (--all)": ["--all"], "default (100 rows + count)": [], "--jsonl": ["--jsonl"]}


def url_for(backend: str, ctx: dict[str, Any], count: int) -> str:
    """A store of its own per backend and count."""
    if backend == "sqlite":
        return f"sqlite:///{ctx['dir']}/listing-{count}.db"
    if backend == "file":
        return f"file://{ctx['dir']}/listing-{count}"
    if backend == "redis":
        return f"{ctx['redis']}?prefix=listing{count}:"
    return f"{ctx['postgres']}?schema=bench_listing_{count}"


def populate(backend: str, ctx: dict[str, Any], count: int) -> float:
    """Park `count` small envelopes; returns seconds taken."""
    from _cycle import sealer

    import berth

    url = url_for(backend, ctx, count)
    options: dict[str, Any] = {}
    if backend == "sqlite":
        options["synchronous"] = "NORMAL"
    elif backend == "file":
        options["fsync"] = False
    elif backend == "postgres":
        url += "&options=-c%20synchronous_commit%3Doff"
        options["pool_max_size"] = 8
    now = datetime.now(timezone.utc)
    past, future = now - timedelta(hours=1), now + timedelta(days=14)
    t0 = time.perf_counter()
    with berth.open_store(url, identity="bench", sealer=sealer(), **options) as store:

        def park(i: int) -> None:
            store.save(
                f"org/repo-{i % 97}/pr#{i}",
                berth.Envelope(
                    provider_state={"messages": [{"role": "user", "content": f"approve deploy {i}?"}]},
                    run_id=f"run-{i}",
                    deadline=past if i % EXPIRED_EVERY == 0 else future,
                    labels={"repo": f"org/repo-{i % 97}", "kind": "approval"},
                ),
            )

        if backend in ("postgres", "redis"):
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(park, range(count), chunksize=256))
        else:
            for i in range(count):
                park(i)
    return time.perf_counter() - t0


def _floor_scan(backend: str, url: str) -> int:
    """The raw client reading every head under identity `bench`, as `Store.list` must at least; returns how many."""
    n = 0
    if backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        cur = conn.execute(
            "SELECT name, substr(data, 1, ?), gen, length(data) FROM berth_frames WHERE name >= 'bench/' "
            "AND name < 'bench0' ORDER BY name",
            (HEAD,),
        )
        while rows := cur.fetchmany(256):
            n += len(rows)
        conn.close()
    elif backend == "postgres":
        import psycopg

        dsn, _, query = url.partition("?")
        schema = query.partition("schema=")[2].partition("&")[0]
        with psycopg.connect(dsn) as pg, pg.cursor(name="floor") as pcur:
            pcur.itersize = 500
            pcur.execute(
                f"SELECT name, substring(data from 1 for %s), gen, length(data) FROM {schema}.frames "  # noqa: S608
                "WHERE name >= 'bench/' AND name < 'bench0' ORDER BY name",
                (HEAD,),
            )
            for _ in pcur:
                n += 1
    elif backend == "file":
        directory = url.removeprefix("file://") + "/bench"
        if os.path.isdir(directory + "@2"):  # the ordered layout (a legacy store keeps `bench/`)
            directory += "@2"
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(dfd) as entries:
                for entry in entries:
                    if entry.name.endswith(".frame"):
                        fd = os.open(entry.name, os.O_RDONLY, dir_fd=dfd)
                        os.read(fd, HEAD + 2048)  # the backend's record head, the name, then the frame's head
                        os.close(fd)
                        n += 1
        finally:
            os.close(dfd)
    elif backend == "redis":
        import redis

        base, _, query = url.partition("?")
        prefix = query.partition("prefix=")[2]
        client = redis.Redis.from_url(base)
        cursor = 0
        while True:
            cursor, keys = client.scan(cursor, match=f"{prefix}frame:bench/*", count=1000)
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.getrange(key, 0, HEAD + 19)
            n += len(pipe.execute())
            if int(cursor) == 0:
                break
        client.close()
    return n


def listing_job(args: dict[str, Any]) -> dict[str, Any]:
    """In the worker: one full listing, one floor scan or one sweep, timed, with its CPU and peak RSS growth."""
    import gc

    from _cycle import sealer
    from _large import _peak, _reset_peak

    import berth

    load = os.getloadavg()[0]
    store = berth.open_store(args["url"], identity="bench", sealer=sealer())
    next(iter(store.list("org/repo-1/", limit=1)), None)  # connect and warm up before the baseline
    gc.collect()
    before = current_rss()
    _reset_peak()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if args["op"] == "list":
        n = 0
        for _ in store.list():
            n += 1
        done = n
    elif args["op"] == "floor":
        n = done = _floor_scan(args["backend"], args["url"])
    else:
        done = store.sweep()
        n = args["count"]
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    growth = _peak() - before
    store.close()
    return {"entries": n, "done": done, "wall": wall, "cpu": cpu, "peak_growth": growth, "load": load}


def run_one(backend: str, url: str, op: str, count: int) -> dict[str, Any]:
    """Spawn one listing, floor or sweep worker."""
    result: dict[str, Any] = run_worker(
        "listing",
        {"backend": backend, "url": url, "op": op, "count": count},
        f"listing worker for {backend} {count} {op}",
        900,
    )
    return result


def run(backends: list[str], counts: list[int], ctx: dict[str, Any], trials: int) -> dict[str, Any]:
    """Per backend and count: `trials` listings and floor scans (alternating, across counts), then a sweep."""
    out: dict[str, Any] = {}
    for backend in backends:
        rows: dict[int, dict[str, Any]] = {}
        for count in counts:
            rows[count] = {"populate_s": populate(backend, ctx, count), "list": [], "floor": [], "sweep": []}
        for trial in range(trials):
            for count in counts:
                url = url_for(backend, ctx, count)
                for op in ("list", "floor") if trial % 2 == 0 else ("floor", "list"):
                    rows[count][op].append(run_one(backend, url, op, count))
        for count in counts:
            rows[count]["sweep"].append(run_one(backend, url_for(backend, ctx, count), "sweep", count))
        out[backend] = rows
    return out


def _berth_script() -> str:
    return str(Path(sys.executable).parent / "berth")


def _ls_once(url: str, extra: list[str]) -> dict[str, Any]:
    """One `berth ls` run: wall time to the end, time to its first byte, peak RSS, bytes written."""
    load = os.getloadavg()[0]
    env = {**os.environ, "COLUMNS": "120", "BERTH_IDENTITY": "bench"}
    env.pop("BERTH_KEYRING", None)
    env.pop("BERTH_KMS", None)
    # GNU time reports the child's own peak RSS: wait4's ru_maxrss from here would include this
    # process's size at the fork, before the exec.
    timer = ["/usr/bin/time", "-f", "%M"] if os.path.exists("/usr/bin/time") else []
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*timer, _berth_script(), "ls", "--url", url, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    first: list[float] = []
    total = [0]

    def drain() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(1 << 16):  # type: ignore[attr-defined]  # a BufferedReader
            if not first:
                first.append(time.perf_counter() - t0)
            total[0] += len(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    reader.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"berth ls {' '.join(extra)} failed: {err.strip()[-300:]}")
    peak = int(err.split()[-1]) * 1024 if timer else usage.ru_maxrss * 1024
    return {"wall": wall, "first_byte": first[0] if first else wall, "peak_rss": peak, "bytes": total[0], "load": load}


def run_ls(counts: list[int], ctx: dict[str, Any], trials: int) -> dict[str, Any]:
    """`berth ls` as a table, by default and as `--jsonl` on the SQLite stores `run` populated, interleaved."""
    out: dict[str, Any] = {str(count): {form: [] for form in LS_FORMS} for count in counts}
    for trial in range(trials):
        for count in counts:
            forms = list(LS_FORMS.items())
            for form, extra in forms if trial % 2 == 0 else forms[::-1]:
                out[str(count)][form].append(_ls_once(url_for("sqlite", ctx, count), extra))
    return out
