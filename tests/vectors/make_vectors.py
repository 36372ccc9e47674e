"""Regenerate the known-answer frame vectors (a format change is a visible decision).

    .venv/bin/python tests/vectors/make_vectors.py

Writes plaintext.frame and aes-gcm.frame (format 1: JSON state) and
binary-plaintext.frame and binary-aes-gcm.frame (format 2: binary state) beside
this file from fixed inputs: the envelopes below, a fixed created_at, a fixed
AES-256 key and a fixed nonce injected through the sealer's private `_nonce` hook.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import berth
from berth.backends.memory import MemoryBackend

HERE = Path(__file__).parent
IDENTITY = "pr-bot"
KEY = "org/repo#42"
AES_KEY = bytes(range(32))
AES_KEY_ID = "kat-key-1"
NONCE = bytes.fromhex("000102030405060708090a0b")


def envelope() -> berth.Envelope:
    return berth.Envelope(
        provider="anthropic",
        model="claude-test",
        config_digest=berth.digest_json({"tools": ["ask_human"], "system": "be careful"}),
        run_id="run-7",
        provider_state=b'{"messages":[{"role":"user","content":"may I merge?"}]}',
        loop_state=b'{"step":2}',
        pending_calls=[berth.PendingCall("toolu_1", "ask_human", b'{"question":"Merge #42?"}')],
        turn=2,
        remaining_turns=8,
        reason="awaiting answer",
        trace_id="trace-1",
        deadline=datetime(2030, 1, 1, tzinfo=timezone.utc),
        created_at=datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=timezone.utc),
        labels={"repo": "org/repo", "pr": "42"},
    )


BINARY_STATE = b"\x81\xa8messages\x91\x82\xa4role\xa4user\xa7content\xacmay I merge?"
"""The state of `envelope()` as MessagePack: opaque bytes to berth."""
CONTENT_TYPE = "application/msgpack"


def binary_envelope() -> berth.Envelope:
    """`envelope()` with its state as binary bytes under a content type (a format 2 frame)."""
    return envelope().replace(provider_state=BINARY_STATE, content_type=CONTENT_TYPE)


def sealers() -> dict[str, berth.Sealer]:
    aes = berth.AesGcmSealer(berth.Keyring({AES_KEY_ID: AES_KEY}, AES_KEY_ID))
    aes._nonce = lambda: NONCE
    return {"plaintext": berth.PlaintextSealer(), "aes-gcm": aes}


def frame(sealer: berth.Sealer, env: berth.Envelope | None = None) -> bytes:
    store = berth.Store(MemoryBackend(), identity=IDENTITY, sealer=sealer)
    store.save(KEY, envelope() if env is None else env)
    found = store.backend.get(f"{IDENTITY}/{KEY}")
    assert found is not None
    return bytes(found[0])


if __name__ == "__main__":
    for name, sealer in sealers().items():
        (HERE / f"{name}.frame").write_bytes(frame(sealer))
        print(f"wrote {name}.frame")
        (HERE / f"binary-{name}.frame").write_bytes(frame(sealer, binary_envelope()))
        print(f"wrote binary-{name}.frame")
