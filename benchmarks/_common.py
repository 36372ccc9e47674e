"""Shared pieces of the benchmark suite: the state, the keys, the interleaved runner, statistics."""

from __future__ import annotations

import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec

STATE_BYTES = 64 * 1024
KEY = bytes(range(32))  # a fixed AES-256 key: figures, not secrets
DEADLINE = datetime(2099, 1, 1, tzinfo=timezone.utc)
_WORDS = (
    "the deploy failed because the token expired merge retry customer ticket escalate refund policy "
    "approve branch review comment build pipeline staging production rollback incident summary draft "
    "é 请 🙂 naïve schema migration index latency budget"
).split()


def chat_messages(target: int = STATE_BYTES, seed: int = 42) -> list[dict[str, Any]]:
    """A list of chat messages whose JSON encoding is just under `target` bytes."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    enc = msgspec.json.Encoder()
    size = 2
    while True:
        n = len(messages)
        if n % 5 == 3:
            content: list[dict[str, Any]] = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{n:06d}",
                    "name": "search_tickets",
                    "input": {"query": " ".join(rng.choices(_WORDS, k=6)), "limit": rng.randint(1, 50)},
                },
            ]
        else:
            content = [{"type": "text", "text": " ".join(rng.choices(_WORDS, k=rng.randint(10, 120)))}]
        msg = {
            "id": f"msg_{n:06d}",
            "role": "user" if n % 2 == 0 else "assistant",
            "content": content,
            "usage": {"input_tokens": rng.randint(1, 4000), "output_tokens": rng.randint(1, 800)},
        }
        grown = size + len(enc.encode(msg)) + 1
        if grown > target:
            return messages
        messages.append(msg)
        size = grown


def big_state_bytes(target: int) -> bytes:
    """JSON bytes of about `target` bytes (a long transcript), built without holding the objects twice."""
    one = msgspec.json.encode(chat_messages(1 << 20, seed=7))[1:-1]
    reps = max(1, target // (len(one) + 1))
    out = bytearray(b"[")
    for i in range(reps):
        if i:
            out += b","
        out += one
    out += b"]"
    return bytes(out)


# --- the interleaved runner ------------------------------------------------------------


@dataclass
class Variant:
    """One contender in a group: `op()` does one unit of work (a cycle, a seal round trip...)."""

    name: str
    op: Callable[[], Any]
    role: str = "berth"  # berth | floor | peer
    units: float = 1.0  # work per op (bytes for throughput groups)
    setup: Callable[[], Any] | None = None
    teardown: Callable[[], Any] | None = None
    handle: Any = None  # the store, floor or saver under test, for counters


@dataclass
class Result:
    """Per-trial rates of one variant (units per second)."""

    name: str
    role: str
    rates: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # this process's CPU seconds per op, per trial
    ops: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def lo(self) -> float:
        return min(self.rates)

    @property
    def hi(self) -> float:
        return max(self.rates)


def interleave(variants: Sequence[Variant], *, trials: int, budget: float, min_ops: int = 3) -> dict[str, Result]:
    """Run every variant for `budget` seconds per trial, rotating the order each trial.

    Each trial runs all variants back to back, so slow drift of the machine
    (other engineers' tests on the same two cores) hits them alike, and
    per-trial ratios between them cancel it.
    """
    for v in variants:
        if v.setup:
            v.setup()
    results = {v.name: Result(v.name, v.role) for v in variants}
    try:
        for v in variants:  # warm-up: caches, connections, prepared statements
            deadline = time.perf_counter() + budget / 3
            while time.perf_counter() < deadline:
                v.op()
        for trial in range(trials):
            k = trial % len(variants)
            order = list(variants[k:]) + list(variants[:k])
            if trial % 2:
                order.reverse()
            for v in order:
                gc.collect()
                n = 0
                c0 = time.process_time()
                t0 = time.perf_counter()
                deadline = t0 + budget
                while True:
                    v.op()
                    n += 1
                    now = time.perf_counter()
                    if now >= deadline and n >= min_ops:
                        break
                results[v.name].cpu.append((time.process_time() - c0) / n)
                results[v.name].rates.append(n * v.units / (now - t0))
                results[v.name].ops += n
    finally:
        for v in variants:
            if v.teardown:
                v.teardown()
    return results


def paired_ratio(a: Result, b: Result) -> tuple[float, float, float]:
    """Median, min and max of a/b over trials (rates of the same trial are paired)."""
    ratios = [x / y for x, y in zip(a.rates, b.rates, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def rusage_maxrss() -> int:
    """Peak resident set size of this process so far, in bytes."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss() -> int:
    """Resident set size now, in bytes (from /proc)."""
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def deadline_in(days: int = 14) -> datetime:
    """An aware deadline `days` from now."""
    return datetime.now(timezone.utc) + timedelta(days=days)


# --- measurements in a fresh process (benchmarks/_worker.py) -------------------------------

WORKER = str(Path(__file__).resolve().with_name("_worker.py"))


def worker_command(job: str, args: dict[str, Any]) -> list[str]:
    """The command line that runs `job` with `args` in a fresh interpreter."""
    return [sys.executable, WORKER, job, json.dumps(args)]


def worker_result(stdout: str, stderr: str, returncode: int, what: str) -> Any:
    """The result a worker printed (its `RESULT` line, decoded); RuntimeError naming `what` if it failed."""
    line = next((ln[7:] for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
    if returncode != 0 or line is None:
        raise RuntimeError(f"{what} failed: {stderr.strip()[-800:]}")
    return json.loads(line)


def run_worker(job: str, args: dict[str, Any], what: str, timeout: float) -> Any:
    """Run one worker to completion and return its result."""
    proc = subprocess.run(worker_command(job, args), capture_output=True, text=True, check=False, timeout=timeout)
    return worker_result(proc.stdout, proc.stderr, proc.returncode, what)
