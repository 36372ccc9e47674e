"""Workload 11: what a witness costs -- the cycle with and without one, and the extra durable writes.

A witnessed store (`open_store(..., witness=URL)`, issue 20) keeps a sealed record
per key in a second location: here a second SQLite file, a second PostgreSQL
schema, a second Redis key prefix (on the same server, so the figures show the
witness's own cost, not another machine's latency). The same 64 KiB chat-state
cycle as workload 1 runs interleaved: berth without a witness, berth with one,
and the raw-client floor, trial by trial.
"""

from __future__ import annotations

from typing import Any

from _common import Variant, interleave
from _cycle import berth_url, berth_variant, floor_variant, make_floor

BACKENDS = ("sqlite", "postgres", "redis")
PLAIN = "berth sealed"
WITNESSED = "berth sealed + witness"


def witness_url(backend: str, ctx: dict[str, Any], tag: str) -> str:
    """The witness location for `backend`: another file, schema or key prefix than the store's."""
    if backend == "sqlite":
        return f"sqlite:///{ctx['dir']}/{tag}-witness.db"
    if backend == "postgres":
        return f"{ctx['postgres']}?schema=bench_{tag.replace('-', '_')}_witness"
    if backend == "redis":
        return f"{ctx['redis']}?prefix=berth-witness-{tag}:"
    raise ValueError(backend)


def witnessed_variant(backend: str, ctx: dict[str, Any], messages: list[dict[str, Any]], tag: str) -> Variant:
    """berth's cycle on `backend` with a witness beside it."""
    url, options = berth_url(backend, ctx, f"{tag}-w")
    return berth_variant(url, messages, name=WITNESSED, witness=witness_url(backend, ctx, tag), **options)


def group(backend: str, ctx: dict[str, Any], messages: list[dict[str, Any]], tag: str = "witness") -> list[Variant]:
    """berth without and with a witness, and the floor, on the same storage."""
    url, options = berth_url(backend, ctx, tag)
    return [
        berth_variant(url, messages, name=PLAIN, **options),
        witnessed_variant(backend, ctx, messages, tag),
        floor_variant(make_floor(backend, ctx, tag), messages),
    ]


def run(
    backends: list[str], ctx: dict[str, Any], messages: list[dict[str, Any]], *, trials: int, budget: float, n: int
) -> dict[str, Any]:
    """Per backend: the interleaved rates, and per-cycle counts of berth without and with the witness."""
    from _counts import count

    out: dict[str, Any] = {}
    for backend in backends:
        results = interleave(group(backend, ctx, messages), trials=trials, budget=budget)
        entry: dict[str, Any] = {
            "cycle": {name: {"role": r.role, "rates": r.rates, "cpu": r.cpu} for name, r in results.items()}
        }
        try:
            entry["counts"] = {role: count(backend, role, ctx, n=n) for role in ("berth", "witness")}
        except Exception as exc:  # a count that fails is reported, never dropped
            entry["counts"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        out[backend] = entry
    return out
