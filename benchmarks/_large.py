"""Workload 3: a 64 MiB `provider_state` saved, loaded and claimed -- wall time and peak memory.

Each measurement runs in a fresh process: read the payload from a file,
reset the kernel's peak-RSS mark (`/proc/self/clear_refs`), do one call, and
report the wall time and the peak. `peak growth` is the peak RSS during the
call above the RSS just before it (so for a save the caller's own copy of the
state is not counted, for a load the returned state is); `peak above
interpreter` also counts the caller's input. `resource.getrusage` is reported
too, but after `exec` from a large parent it can carry the parent's peak, so
the doc uses the reset mark.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from _common import current_rss, run_worker, rusage_maxrss

KEY = "org/repo#large"


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def large_job(args: dict[str, Any]) -> dict[str, Any]:
    """In the worker: one save, load or claim of the payload, by berth or the floor."""
    from _cycle import berth_url, make_floor, sealer

    import berth

    backend, role, op, ctx = args["backend"], args["role"], args["op"], args["ctx"]
    tag = "large"
    if role == "berth":
        url, options = berth_url(backend, ctx, tag)
        store = berth.open_store(url, identity="bench", sealer=sealer(), **options)
        name = KEY
        # The sealer imports cryptography on first use (the floor has it imported already):
        # seal and open once first, so the import's few MiB are not counted as the call's.
        store.sealer.open(store.sealer.seal(b"{}", aad=b"warm"), aad=b"warm")
    else:
        floor = make_floor(backend, ctx, tag)
        name = "bench/" + KEY
    gc.collect()
    _reset_peak()
    base = current_rss()
    result: Any = None
    if op == "save":
        with open(args["payload"], "rb") as f:
            payload = f.read()
        before = current_rss()
        _reset_peak()
        t0 = time.perf_counter()
        if role == "berth":
            store.save(KEY, berth.Envelope(provider_state=payload, run_id="run-large"))
        else:
            floor.save_bytes(name, payload)
        wall = time.perf_counter() - t0
        size = len(payload)
    else:
        before = current_rss()
        t0 = time.perf_counter()
        if role == "berth":
            if op == "load":
                parked = store.load(KEY)
                assert parked is not None
                result = parked.envelope.provider_state
            else:
                env = store.claim(KEY)
                assert env is not None
                result = env.provider_state
        else:
            found = floor.load_bytes(name)
            assert found is not None
            result = found[0]
            if op == "claim":
                floor.delete(name, found[1])
        wall = time.perf_counter() - t0
        size = len(result)
    peak = _peak()
    maxrss = rusage_maxrss()
    if role == "berth":
        store.close()
    else:
        floor.close()
    return {
        "wall": wall,
        "size": size,
        "peak_growth": peak - before,
        "peak_above_interpreter": peak - base,
        "rusage_maxrss": maxrss,
    }


def run_one(backend: str, role: str, op: str, ctx: dict[str, Any], payload: str) -> dict[str, Any]:
    """Spawn one worker for one measurement."""
    args = {"backend": backend, "role": role, "op": op, "ctx": ctx, "payload": payload}
    result: dict[str, Any] = run_worker("large", args, f"large worker for {backend}/{role}/{op}", 600)
    return result


def run(backends: list[str], ctx: dict[str, Any], payload: str, trials: int) -> dict[str, Any]:
    """Interleave berth and floor, op by op, `trials` times per backend."""
    out: dict[str, Any] = {}
    for backend in backends:
        rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for _ in range(trials):
            for op in ("save", "load", "claim"):  # claim removes what save parked; the next save parks it again
                for role in ("berth", "floor"):
                    rows.setdefault(op, {}).setdefault(role, []).append(run_one(backend, role, op, ctx, payload))
        out[backend] = rows
    return out
