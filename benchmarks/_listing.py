"""Workload 4: list and sweep 10k and 100k parked envelopes on SQLite and PostgreSQL.

The envelopes are parked through the public API beforehand (SQLite with
`synchronous=NORMAL`, PostgreSQL with `synchronous_commit=off` and a few
threads, to populate quickly); 1 in 100 is past its deadline. Each listing
and each sweep runs in a fresh process that reports entries per second and
its peak RSS growth (the kernel's reset peak mark, as in `_large`), so a
listing that held every entry would show memory growing tenfold from 10k to
100k.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

from _common import current_rss, run_worker

EXPIRED_EVERY = 100


def url_for(backend: str, ctx: dict[str, Any], count: int) -> str:
    """A store of its own per backend and count."""
    if backend == "sqlite":
        return f"sqlite://{ctx['dir']}/listing-{count}.db"
    return f"{ctx['postgres']}?schema=bench_listing_{count}"


def populate(backend: str, ctx: dict[str, Any], count: int) -> float:
    """Park `count` small envelopes; returns seconds taken."""
    from _cycle import sealer

    import berth

    url = url_for(backend, ctx, count)
    options: dict[str, Any] = {}
    if backend == "sqlite":
        options["synchronous"] = "NORMAL"
    else:
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

        if backend == "sqlite":
            for i in range(count):
                park(i)
        else:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(park, range(count), chunksize=256))
    return time.perf_counter() - t0


def listing_job(args: dict[str, Any]) -> dict[str, Any]:
    """In the worker: one full listing or one sweep, timed, with its peak RSS growth."""
    import gc

    from _cycle import sealer
    from _large import _peak, _reset_peak

    import berth

    store = berth.open_store(args["url"], identity="bench", sealer=sealer())
    next(iter(store.list("org/repo-1/")), None)  # connect and warm up before the baseline
    gc.collect()
    before = current_rss()
    _reset_peak()
    t0 = time.perf_counter()
    if args["op"] == "list":
        n = 0
        for _ in store.list():
            n += 1
        done = n
    else:
        done = store.sweep()
        n = args["count"]
    wall = time.perf_counter() - t0
    growth = _peak() - before
    store.close()
    return {"entries": n, "done": done, "wall": wall, "peak_growth": growth}


def run_one(url: str, op: str, count: int) -> dict[str, Any]:
    """Spawn one listing or sweep worker."""
    result: dict[str, Any] = run_worker(
        "listing", {"url": url, "op": op, "count": count}, f"listing worker for {url} {op}", 900
    )
    return result


def run(backends: list[str], counts: list[int], ctx: dict[str, Any], trials: int) -> dict[str, Any]:
    """Per backend and count: `trials` listings (interleaved across counts), then one sweep each."""
    out: dict[str, Any] = {}
    for backend in backends:
        rows: dict[int, dict[str, Any]] = {}
        for count in counts:
            rows[count] = {"populate_s": populate(backend, ctx, count), "list": [], "sweep": []}
        for _ in range(trials):
            for count in counts:
                rows[count]["list"].append(run_one(url_for(backend, ctx, count), "list", count))
        for count in counts:
            rows[count]["sweep"].append(run_one(url_for(backend, ctx, count), "sweep", count))
        out[backend] = rows
    return out
