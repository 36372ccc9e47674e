"""Hot-loop CPU of the save path's pieces (issue 15.4), beside a hand-written floor.

    PYTHONPATH=$PWD/src python scripts/save_path_cpu.py [--n 3000] [--rounds 7]

Each row is `time.process_time` per call, the least over rounds (a hot loop: what berth's own
Python costs when it is warm). Uses berth privates (the codec), so it lives in scripts/.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import orjson
from _common import DEADLINE, KEY, chat_messages
from _cycle import chat_envelope, sealer
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import berth
from berth._codec import seal_frame


def per_call(fn, n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t) / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    messages = chat_messages()
    aead = AESGCM(KEY)
    aad = b"bench/org/repo#1"
    table: dict[str, bytes] = {}

    def floor_encode() -> None:
        orjson.dumps(messages)

    def floor_save() -> None:
        table["k"] = aead.encrypt(os.urandom(12), orjson.dumps(messages), aad)

    env = chat_envelope(messages)
    s = sealer()
    created = DEADLINE

    def envelope() -> None:
        chat_envelope(messages)

    def seal() -> None:
        seal_frame(env, identity="bench", key="org/repo#1", created_at=created, sealer=s, max_bytes=1 << 26)

    state = orjson.dumps(messages)

    def encrypt_only() -> None:
        aead.encrypt(os.urandom(12), state, aad)

    store = berth.open_store("memory://", identity="bench", sealer=sealer())

    def save() -> None:
        store.save("org/repo#1", env)

    def save_build() -> None:
        store.save("org/repo#1", chat_envelope(messages))

    def save_delete() -> None:
        tok = store.save("org/repo#1", chat_envelope(messages))
        store.delete("org/repo#1", tok)

    def floor_save_delete() -> None:
        floor_save()
        del table["k"]

    rows = [
        ("floor: orjson.dumps", floor_encode),
        ("floor: AESGCM.encrypt (64 KiB)", encrypt_only),
        ("floor: dumps + encrypt + dict put", floor_save),
        ("floor: save + del", floor_save_delete),
        ("Envelope(...)", envelope),
        ("seal_frame", seal),
        ("store.save (built env)", save),
        ("store.save(Envelope(...))", save_build),
        ("save(Envelope(...)) + delete", save_delete),
    ]
    for _name, fn in rows:
        fn()
    for name, fn in rows:
        print(f"{name:36s} {per_call(fn, a.n, a.rounds):8.1f} us")


if __name__ == "__main__":
    main()
