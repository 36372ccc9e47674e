"""Why berth encodes envelopes with msgspec: JSON codecs on a 16 MiB chat transcript.

    .venv/bin/python benchmarks/bench_json_codec.py [--mib 16] [--trials 7]

Per codec: encode (Python objects -> bytes), decode (bytes -> objects), and
berth's own path: validate state bytes once (msgspec decode to Raw), then carry
them verbatim into the envelope JSON and back out without re-parsing.
Trials are interleaved across codecs; medians in MB/s of the JSON size.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone

import msgspec
import orjson

from berth._envelope import Envelope, decode_envelope, encode_envelope


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
    args = ap.parse_args()
    obj = {"messages": transcript(args.mib)}
    data = msgspec.json.encode(obj)
    mb = len(data) / 1e6
    env = Envelope(provider_state=data)
    now = datetime.now(timezone.utc)
    body = encode_envelope(env, now)
    enc, dec = msgspec.json.Encoder(), msgspec.json.Decoder()
    cases: dict[str, Callable[[], object]] = {
        "stdlib json  encode": lambda: json.dumps(obj, ensure_ascii=False).encode(),
        "stdlib json  decode": lambda: json.loads(data),
        "orjson       encode": lambda: orjson.dumps(obj),
        "orjson       decode": lambda: orjson.loads(data),
        "msgspec      encode": lambda: enc.encode(obj),
        "msgspec      decode": lambda: dec.decode(data),
        "berth: validate state bytes once": lambda: Envelope(provider_state=data),
        "berth: envelope encode (state raw)": lambda: encode_envelope(env, now),
        "berth: envelope decode (state raw)": lambda: decode_envelope(body),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.trials):
        for name, fn in cases.items():
            times[name].append(timed(fn))
    print(f"payload: {mb:.1f} MB of JSON, {len(obj['messages'])} messages; median of {args.trials} trials")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<36} {mb / med:8.0f} MB/s   ({med * 1000:7.1f} ms)")


if __name__ == "__main__":
    main()
