"""Workload 2: sealing throughput at 64 KiB and 16 MiB, against `AESGCM.encrypt`/`decrypt` called directly.

Three contenders per size, each a seal + open round trip of the same bytes:
- direct: `AESGCM(key).encrypt(nonce, data, aad)` then `.decrypt(...)`, the way
  a caller writes it by hand (fresh output buffers);
- berth sealer: `AesGcmSealer.seal` then `.open`;
- berth frame: what a store does per save and load besides I/O -- a save and
  a claim on `memory://`: the envelope encoded around the state, the cleartext
  header, the AAD, the seal, the frame bytes; then parsing the frame, checking
  the header, opening the body and cutting the state out. The claim (a load and
  a delete) leaves nothing parked between round trips: a 16 MiB frame left in
  the store changed how the allocator served the other contenders (whether
  glibc trims the heap's top after a free), so the direct contender's page
  faults went from none to ~8,000 a round trip with berth's code unchanged.
Throughput counts the plaintext bytes once per round trip.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from _common import KEY, Variant
from _cycle import sealer as make_sealer
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import berth


def variants(size: int) -> list[Variant]:
    """Direct AES-GCM, berth's sealer and berth's frame path on `size` bytes."""
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

    store = berth.open_store("memory://", identity="bench", sealer=sealer)
    # A body of `size` bytes: an envelope whose state is a JSON string of the right length.
    state = b'"' + b"x" * (size - 2) + b'"'
    env = berth.Envelope(provider_state=state, run_id="run-1", created_at=datetime.now(timezone.utc))

    def frame() -> None:
        # The store's own frame path (store -> codec -> sealer), over a dict.
        store.save("org/repo#42", env)
        claimed = store.claim("org/repo#42")
        assert claimed is not None and len(claimed.provider_state) == len(state)

    return [
        Variant("direct AESGCM encrypt + decrypt", direct, "floor", units=size),
        Variant("berth AesGcmSealer seal + open", sealed, "berth", units=size),
        Variant("berth frame seal + open", frame, "berth", units=size),
    ]
