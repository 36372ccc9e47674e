"""Workload 2: sealing throughput at 64 KiB and 16 MiB, against `AESGCM.encrypt`/`decrypt` called directly.

Three contenders per size, each a seal + open round trip of the same bytes:
- direct: `AESGCM(key).encrypt(nonce, data, aad)` then `.decrypt(...)`, the way
  a caller writes it by hand (fresh output buffers);
- berth sealer: `AesGcmSealer.seal` then `.open`;
- berth frame: what a store does per save and load besides I/O and JSON --
  the cleartext header, the AAD, the seal, the frame bytes; then parsing the
  frame, checking the header and opening the body.
Throughput counts the plaintext bytes once per round trip.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

from _common import KEY, Variant
from _cycle import sealer as make_sealer
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import berth


def variants(size: int) -> list[Variant]:
    """Direct AES-GCM, berth's sealer and berth's frame path on `size` bytes."""
    from berth._envelope import Envelope
    from berth.backends.memory import MemoryBackend

    data = os.urandom(size)
    aad = b"bench/org/repo#42"
    aead = AESGCM(KEY)

    def direct() -> None:
        nonce = os.urandom(12)
        ct = aead.encrypt(nonce, data, aad)
        out = aead.decrypt(nonce, ct, aad)
        assert len(out) == size

    sealer = make_sealer()

    def sealed() -> None:
        out = sealer.open(sealer.seal(data, aad=aad), aad=aad)
        assert len(out) == size

    store = berth.Store(MemoryBackend(), identity="bench", sealer=sealer)
    # A body of `size` bytes: an envelope whose state is a JSON string of the right length.
    state = b'"' + b"x" * (size - 2) + b'"'
    env = Envelope(provider_state=state, run_id="run-1")
    created = datetime.now(timezone.utc)
    env = env.replace(created_at=created)

    def frame() -> None:
        # The store's own frame path: encode the envelope around the state, seal, open, cut the state out.
        f: Any = store._seal("org/repo#42", env, created)
        _, pieces = store._open_pieces("org/repo#42", f, split=True)
        assert len(pieces[1]) == len(state)

    return [
        Variant("direct AESGCM encrypt + decrypt", direct, "floor", units=size),
        Variant("berth AesGcmSealer seal + open", sealed, "berth", units=size),
        Variant("berth frame seal + open", frame, "berth", units=size),
    ]
