"""Workload 6: contention on one store, on SQLite and PostgreSQL.

Claims: 4 processes race to claim the same 1,000 keys.

Every process walks the keys in the same order (the worst case: every claim is
contended) and records which keys it won and how long each claim took. The
parent checks that every key was won exactly once. berth (`store.claim`)
alternates with its floor (SELECT, then DELETE ... AND gen=?) trial by trial.

Writers: 2, 4 and 8 processes each park, load and delete a 64 KiB state on a key
of their own, on one store, for a few seconds; the cycle rate in total and the
latency of every cycle (p50, p99, max), berth and the floor alternating race by
race.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from typing import Any

from _common import worker_command, worker_result

PROCESSES = 4


def _keys(count: int) -> list[str]:
    return [f"org/repo/pr#{i}" for i in range(count)]


def _where(backend: str, ctx: dict[str, Any], role: str, trial: int) -> str:
    if backend == "sqlite":
        return f"{ctx['dir']}/contention-{role}-{trial}.db"
    return f"bench_race_{role.replace('-', '_')}_{trial}"


def park(backend: str, ctx: dict[str, Any], role: str, trial: int, count: int) -> None:
    """Park `count` small envelopes (berth) or rows (floor) to race for."""
    from _cycle import sealer
    from _floors import PostgresFloor, SqliteFloor

    import berth

    where = _where(backend, ctx, role, trial)
    state = {"messages": [{"role": "user", "content": "approve?"}]}
    if role == "berth":
        url = f"sqlite:///{where}" if backend == "sqlite" else f"{ctx['postgres']}?schema={where}"
        with berth.open_store(url, identity="bench", sealer=sealer()) as store:
            for key in _keys(count):
                store.save(key, berth.Envelope(provider_state=state, run_id="run-1"))
        return
    floor = SqliteFloor(where) if backend == "sqlite" else PostgresFloor(ctx["postgres"], table=where)
    for key in _keys(count):
        floor.save("bench/" + key, state)
    floor.close()


def claimer_job(args: dict[str, Any]) -> dict[str, Any]:
    """In a worker: wait for the common start, then claim every key once."""
    from _cycle import sealer
    from _floors import Conflict, PostgresFloor, SqliteFloor

    import berth

    backend, role, where, ctx = args["backend"], args["role"], args["where"], args["ctx"]
    keys = _keys(args["count"])
    if role == "berth":
        url = f"sqlite:///{where}" if backend == "sqlite" else f"{ctx['postgres']}?schema={where}"
        store = berth.open_store(url, identity="bench", sealer=sealer())
        store.load("warm/up")

        def claim(key: str) -> bool:
            return store.claim(key) is not None

        close = store.close
    else:
        floor = SqliteFloor(where) if backend == "sqlite" else PostgresFloor(ctx["postgres"], table=where)
        floor.load("warm/up")

        def claim(key: str) -> bool:
            found = floor.load("bench/" + key)
            if found is None:
                return False
            try:
                floor.delete("bench/" + key, found[1])
            except Conflict:
                return False
            return True

        close = floor.close
    while time.time() < args["start_at"]:
        time.sleep(0.001)
    won, latencies = [], []
    t0 = time.perf_counter()
    for key in keys:
        c0 = time.perf_counter()
        if claim(key):
            won.append(key)
        latencies.append(time.perf_counter() - c0)
    wall = time.perf_counter() - t0
    close()
    return {"won": won, "latencies": latencies, "wall": wall}


def race(backend: str, ctx: dict[str, Any], role: str, trial: int, count: int) -> dict[str, Any]:
    """One race: park, start 4 claimers together, check exactly one winner per key."""
    park(backend, ctx, role, trial, count)
    start_at = time.time() + 2.0  # after every interpreter has started and connected
    base = {
        "backend": backend,
        "role": role,
        "where": _where(backend, ctx, role, trial),
        "ctx": ctx,
        "count": count,
        "start_at": start_at,
    }
    procs = [
        subprocess.Popen(
            worker_command("claimer", base),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        results.append(worker_result(out, err, proc.returncode, f"claimer ({backend}/{role})"))
    winners: dict[str, int] = {}
    for r in results:
        for key in r["won"]:
            winners[key] = winners.get(key, 0) + 1
    exactly_once = len(winners) == count and all(v == 1 for v in winners.values())
    latencies = sorted(x for r in results for x in r["latencies"])
    wall = max(r["wall"] for r in results)
    return {
        "claims_per_s": count / wall,
        "attempts_per_s": count * PROCESSES / wall,
        "exactly_once": exactly_once,
        "won": sum(winners.values()),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "max_ms": latencies[-1] * 1000,
        "wall": wall,
    }


def run(backends: list[str], ctx: dict[str, Any], trials: int, count: int = 1000) -> dict[str, Any]:
    """Alternate berth and floor races, `trials` of each per backend."""
    out: dict[str, Any] = {}
    for backend in backends:
        rows: dict[str, list[dict[str, Any]]] = {"berth": [], "floor": []}
        for trial in range(trials):
            order = ("berth", "floor") if trial % 2 == 0 else ("floor", "berth")
            for role in order:
                rows[role].append(race(backend, ctx, role, trial, count))
        out[backend] = rows
    return out


# --- writers: P processes each cycling its own key on one store ----------------------------

WRITERS = (2, 4, 8)
WRITERS_QUICK = (8,)


def writer_job(args: dict[str, Any]) -> dict[str, Any]:
    """In a worker: wait for the common start, then park/load/delete 64 KiB on its own key until the end."""
    from _common import chat_messages
    from _cycle import chat_envelope, sealer
    from _floors import PostgresFloor, SqliteFloor

    import berth

    backend, role, where, ctx = args["backend"], args["role"], args["where"], args["ctx"]
    messages = chat_messages()
    key = f"org/repo#{os.getpid()}"
    if role == "berth":
        url = f"sqlite:///{where}" if backend == "sqlite" else f"{ctx['postgres']}?schema={where}"
        store = berth.open_store(url, identity="bench", sealer=sealer())

        def cycle() -> None:
            store.save(key, chat_envelope(messages))
            parked = store.load(key)
            assert parked is not None
            assert len(parked.envelope.state()) == len(messages)
            store.delete(key, parked.token)

        close = store.close
    else:
        floor = SqliteFloor(where) if backend == "sqlite" else PostgresFloor(ctx["postgres"], table=where)
        name = "bench/" + key

        def cycle() -> None:
            floor.save(name, messages)
            found = floor.load(name)
            assert found is not None
            assert len(found[0]) == len(messages)
            floor.delete(name, found[1])

        close = floor.close
    cycle()  # connect, create, warm
    while time.time() < args["start_at"]:
        time.sleep(0.001)
    latencies = []
    c0 = time.process_time()
    t0 = time.perf_counter()
    end = t0 + args["seconds"]
    now = t0
    while now < end:
        cycle()
        c1 = time.perf_counter()
        latencies.append(c1 - now)
        now = c1
    cpu = time.process_time() - c0
    close()
    return {"latencies": latencies, "wall": now - t0, "cpu": cpu}


def writers(backend: str, ctx: dict[str, Any], role: str, trial: int, processes: int, seconds: float) -> dict[str, Any]:
    """`processes` writers for `seconds` on one store: cycles/s in total, per-cycle latency percentiles."""
    where = _where(backend, ctx, f"writers-{role}", trial)
    if backend == "postgres" and role == "floor":
        from _floors import PostgresFloor  # made once: concurrent CREATE TABLE IF NOT EXISTS collide in the catalog

        PostgresFloor(ctx["postgres"], table=where).close()
    if backend == "sqlite" and role == "floor":
        from _floors import SqliteFloor  # made once: the raw client's switches to WAL collide ("database is locked")

        SqliteFloor(where).close()
    start_at = time.time() + 2.0 + 0.15 * processes  # after every interpreter has started and connected
    base = {"backend": backend, "role": role, "where": where, "ctx": ctx, "start_at": start_at, "seconds": seconds}
    procs = [
        subprocess.Popen(worker_command("writer", base), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append(worker_result(out, err, proc.returncode, f"writer ({backend}/{role})"))
    latencies = sorted(x for r in results for x in r["latencies"])
    cycles = len(latencies)
    wall = max(r["wall"] for r in results)
    return {
        "processes": processes,
        "cycles_per_s": cycles / wall,
        "cpu_us_per_cycle": sum(r["cpu"] for r in results) / cycles * 1e6,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
        "max_ms": latencies[-1] * 1000,
        "slowest_writer_share": min(len(r["latencies"]) for r in results) / (cycles / processes),
        "load": os.getloadavg()[0],
    }


def run_writers(
    backends: list[str], ctx: dict[str, Any], trials: int, counts: tuple[int, ...], seconds: float
) -> dict[str, Any]:
    """Alternate berth and floor, `trials` of each per backend and writer count."""
    out: dict[str, Any] = {}
    for backend in backends:
        per: dict[str, Any] = {}
        for processes in counts:
            rows: dict[str, list[dict[str, Any]]] = {"berth": [], "floor": []}
            for trial in range(trials):
                order = ("berth", "floor") if trial % 2 == 0 else ("floor", "berth")
                for role in order:
                    rows[role].append(writers(backend, ctx, role, trial, processes, seconds))
            per[str(processes)] = rows
        out[backend] = per
    return out
