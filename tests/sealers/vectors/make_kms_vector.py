"""Regenerate the KmsSealer(LocalKms) known-answer frame (a format change is a visible decision).

    .venv/bin/python -m tests.sealers.vectors.make_kms_vector

Writes kms-local.frame beside this file: the envelope of tests/vectors, a fixed
keyring key as the KEK, and a fixed data key, body nonce and wrap nonce injected
through the private hooks of KmsSealer and LocalKms.
"""

from __future__ import annotations

from pathlib import Path

import berth
from berth.kms import LocalKms
from tests.vectors import make_vectors as kat

HERE = Path(__file__).parent
KEK_ID = "kat-kek-1"
KEK = bytes(range(32, 64))
DATA_KEY = bytes(range(64, 96))
BODY_NONCE = bytes.fromhex("101112131415161718191a1b")
WRAP_NONCE = bytes.fromhex("202122232425262728292a2b")


def sealer() -> berth.KmsSealer:
    kms = LocalKms(berth.Keyring({KEK_ID: KEK}, KEK_ID))
    kms._nonce = lambda: WRAP_NONCE
    sealer = berth.KmsSealer(kms)
    sealer._data_key = lambda: DATA_KEY
    sealer._nonce = lambda: BODY_NONCE
    return sealer


if __name__ == "__main__":
    (HERE / "kms-local.frame").write_bytes(kat.frame(sealer()))
    print("wrote kms-local.frame")
