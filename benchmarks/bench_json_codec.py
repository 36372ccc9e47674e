"""Why berth encodes and decodes the state with orjson: JSON codecs, large and cycle-sized.

    .venv/bin/python benchmarks/bench_json_codec.py [--mib 16] [--trials 7] [--cycles 400]

Large: per codec, encode (Python objects -> bytes) and decode (bytes -> objects)
of a 16 MiB chat transcript, and berth's own path: validate state bytes once
(msgspec decode to Raw), carry them into the envelope body, and cut them back
out by offset. Trials are interleaved across codecs; medians in MB/s.

Cycle-sized: the 64 KiB chat state of the park/wake benchmark, each encode or
decode timed (CPU) right after an fsync, as in a real cycle, where code runs
with cold caches and is several times slower than in a hot loop.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import msgspec
import orjson

import berth

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import chat_messages  # noqa: E402


def transcript(mib: int) -> list[dict[str, object]]:
    rng = random.Random(7)
    words = ["the", "deploy", "failed", "because", "token", "é", "merge", "请", "retry", "🙂", "customer", "ticket"]
    messages: list[dict[str, object]] = []
    size = 0
    while size < mib << 20:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
        msg = {
            "role": rng.choice(["user", "assistant"]),
            "content": [{"type": "text", "text": text}],
            "id": f"msg_{len(messages)}",
            "tokens": rng.randint(1, 4000),
        }
        messages.append(msg)
        size += len(text) + 80
    return messages


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=16)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--cycles", type=int, default=400)
    args = ap.parse_args()
    cold(args.cycles)
    obj = {"messages": transcript(args.mib)}
    data = msgspec.json.encode(obj)
    mb = len(data) / 1e6
    env = berth.Envelope(provider_state=data, created_at=datetime.now(timezone.utc))
    # berth's own path through public calls: a plaintext store over a dict is the codec and a checksum.
    store = berth.open_store("memory://", identity="bench", sealer=berth.PlaintextSealer())
    store.save("k", env)
    enc, dec = msgspec.json.Encoder(), msgspec.json.Decoder()
    cases: dict[str, Callable[[], object]] = {
        "stdlib json  encode": lambda: json.dumps(obj, ensure_ascii=False).encode(),
        "stdlib json  decode": lambda: json.loads(data),
        "orjson       encode": lambda: orjson.dumps(obj),
        "orjson       decode": lambda: orjson.loads(data),
        "msgspec      encode": lambda: enc.encode(obj),
        "msgspec      decode": lambda: dec.decode(data),
        "berth: validate state bytes once": lambda: berth.Envelope(provider_state=data),
        "berth: save (encode, state raw)": lambda: store.save("k", env),
        "berth: load (decode, state by offset)": lambda: store.load("k"),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.trials):
        for name, fn in cases.items():
            times[name].append(timed(fn))
    print(f"payload: {mb:.1f} MB of JSON, {len(obj['messages'])} messages; median of {args.trials} trials")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<36} {mb / med:8.0f} MB/s   ({med * 1000:7.1f} ms)")


def cold(cycles: int) -> None:
    """Encode and decode the 64 KiB cycle state right after an fsync, interleaved; median CPU µs."""
    messages = chat_messages()
    data = orjson.dumps(messages)
    enc, dec = msgspec.json.Encoder(), msgspec.json.Decoder()
    cases: dict[str, Callable[[], object]] = {
        "orjson  encode": lambda: orjson.dumps(messages),
        "msgspec encode": lambda: enc.encode(messages),
        "orjson  decode": lambda: orjson.loads(data),
        "msgspec decode": lambda: dec.decode(data),
    }
    times: dict[str, list[int]] = {name: [] for name in cases}
    fd, path = tempfile.mkstemp(dir="/var/tmp")
    try:
        for _ in range(cycles):
            for name, fn in cases.items():
                os.pwrite(fd, data, 0)
                os.fsync(fd)
                t = time.process_time_ns()
                fn()
                times[name].append(time.process_time_ns() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    print(f"cycle-sized: {len(data):,} bytes of JSON, right after an fsync; median CPU of {cycles} each")
    for name, ts in times.items():
        print(f"  {name:<36} {statistics.median(ts) / 1000:8.0f} µs")


if __name__ == "__main__":
    main()
