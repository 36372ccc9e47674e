"""What envelope encryption costs: KmsSealer(LocalKms) next to AesGcmSealer, and KMS calls per cycle.

    .venv/bin/python benchmarks/bench_kms.py [--trials 9] [--budget 0.5] [--kib 64]

1. Per save+load of a 64 KiB JSON chat state on SQLite (WAL, synchronous=FULL),
   one store per sealer in its own database file; then the same on memory://,
   where no I/O hides the sealer's share. Trials are interleaved (the
   order rotates and reverses every trial) so drift of a shared machine hits
   both sealers alike; the cost is the median over trials of the paired
   per-trial difference in microseconds per save+load, and of the ratio.
2. The same for seal+open alone (no storage), which isolates the sealer.
3. KMS calls per park/wake cycle (save, then load and conditional delete),
   and for listing and sweeping, counted at the KMS client.
"""

from __future__ import annotations

import argparse
import collections
import gc
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _common import chat_messages  # noqa: E402
from _cycle import chat_envelope  # noqa: E402

import berth
from berth.kms import LocalKms, Wrapped

KEY = "org/repo#42"


class CountingKms:
    """Counts wrap/unwrap calls on the way to the real client."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    @property
    def key_id(self) -> str:
        return str(self.inner.key_id)

    def holds(self, key_id: str) -> bool:
        return bool(self.inner.holds(key_id))

    def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Wrapped:
        self.calls["wrap"] += 1
        return self.inner.wrap(data_key, context=context)

    def unwrap(self, wrapped: Wrapped, *, context: Mapping[str, str]) -> bytes:
        self.calls["unwrap"] += 1
        return self.inner.unwrap(wrapped, context=context)


def interleave(ops: dict[str, Callable[[], None]], trials: int, budget: float) -> dict[str, list[float]]:
    """Seconds per op, one figure per trial per variant; order rotates and reverses each trial."""
    names = list(ops)
    for name in names:  # warm-up
        end = time.perf_counter() + budget / 3
        while time.perf_counter() < end:
            ops[name]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for trial in range(trials):
        order = names[trial % len(names) :] + names[: trial % len(names)]
        if trial % 2:
            order.reverse()
        for name in order:
            gc.collect()
            n, t0 = 0, time.perf_counter()
            while True:
                ops[name]()
                n += 1
                now = time.perf_counter()
                if now - t0 >= budget and n >= 3:
                    break
            out[name].append((now - t0) / n)
    return out


def paired(times: dict[str, list[float]], a: str, b: str) -> tuple[float, float]:
    """Median extra microseconds of `a` over `b`, and median ratio, over paired trials."""
    diffs = [(x - y) * 1e6 for x, y in zip(times[a], times[b], strict=True)]
    ratios = [x / y for x, y in zip(times[a], times[b], strict=True)]
    return statistics.median(diffs), statistics.median(ratios)


def report(title: str, times: dict[str, list[float]], base: str, other: str) -> None:
    print(title)
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = f"trials {min(ts) * 1e6:.1f}-{max(ts) * 1e6:.1f} µs"
        print(f"  {name:<28} {med * 1e6:9.1f} µs/op  ({1 / med:8.0f} op/s; {spread})")
    extra, ratio = paired(times, other, base)
    print(f"  cost of {other} over {base}: {extra:+.1f} µs per op (median paired), ratio {ratio:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per variant per trial")
    ap.add_argument("--kib", type=int, default=64, help="size of the JSON state")
    args = ap.parse_args()

    messages = chat_messages(args.kib * 1024)
    keyring = berth.Keyring.generate()
    aes = berth.AesGcmSealer(keyring)
    kms = berth.KmsSealer(LocalKms(berth.Keyring.generate()))

    def envelope() -> berth.Envelope:
        return chat_envelope(messages)

    env = envelope()

    def save_load(store: berth.Store) -> Callable[[], None]:
        def op() -> None:
            store.save(KEY, envelope())
            parked = store.load(KEY)
            assert parked is not None and len(parked.envelope.state()) == len(messages)

        return op

    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "AesGcmSealer": berth.open_store(f"sqlite:///{Path(tmp) / 'aes.db'}", identity="bench", sealer=aes),
            "KmsSealer(LocalKms)": berth.open_store(f"sqlite:///{Path(tmp) / 'kms.db'}", identity="bench", sealer=kms),
        }

        times = interleave({n: save_load(s) for n, s in stores.items()}, args.trials, args.budget)
        print(
            f"state: {len(env.provider_state) / 1024:.1f} KiB JSON, {len(messages)} messages; "
            f"{args.trials} interleaved trials of {args.budget}s per variant"
        )
        report("save + load on SQLite (WAL, synchronous=FULL):", times, "AesGcmSealer", "KmsSealer(LocalKms)")
        for s in stores.values():
            s.close()

    in_memory = {
        "AesGcmSealer": berth.open_store("memory://", identity="bench", sealer=aes),
        "KmsSealer(LocalKms)": berth.open_store("memory://", identity="bench", sealer=kms),
    }
    times = interleave({n: save_load(s) for n, s in in_memory.items()}, args.trials, args.budget)
    report("save + load on memory:// (no I/O: codec and sealer only):", times, "AesGcmSealer", "KmsSealer(LocalKms)")

    plain = b"x" * len(env.provider_state)
    aad = f"bench/{KEY}".encode()  # associated data of the caller's own (the store's path is timed above)

    def seal_open(sealer: Any) -> Callable[[], None]:
        def op() -> None:
            assert len(sealer.open(sealer.seal(plain, aad=aad), aad=aad)) == len(plain)

        return op

    times = interleave(
        {"AesGcmSealer": seal_open(aes), "KmsSealer(LocalKms)": seal_open(kms)}, args.trials, args.budget
    )
    report(f"seal + open of {len(plain) / 1024:.0f} KiB, no storage:", times, "AesGcmSealer", "KmsSealer(LocalKms)")

    counting = CountingKms(LocalKms(berth.Keyring.generate()))
    now = datetime.now(timezone.utc)
    store = berth.open_store("memory://", identity="bench", sealer=berth.KmsSealer(counting), clock=lambda: now)
    cycles = 100
    for i in range(cycles):
        store.save(f"k{i}", envelope().replace(deadline=now + timedelta(hours=1)))
        assert store.claim(f"k{i}") is not None
    per_cycle = {k: v / cycles for k, v in counting.calls.items()}
    for i in range(cycles):
        store.save(f"k{i}", envelope().replace(deadline=now + timedelta(hours=1)))
    counting.calls.clear()
    listed = sum(1 for _ in store.list())
    swept = store.sweep(now=now + timedelta(hours=2))
    print("KMS calls:")
    print(
        f"  per park/wake cycle (save; load + conditional delete), over {cycles} cycles: "
        f"wrap {per_cycle.get('wrap', 0):g}, unwrap {per_cycle.get('unwrap', 0):g}"
    )
    print(f"  listing {listed} and sweeping {swept} envelopes: {sum(counting.calls.values())} calls")


if __name__ == "__main__":
    main()
