"""The KmsSealer(LocalKms) known-answer frame: its format is a visible decision."""

from __future__ import annotations

from pathlib import Path

import pytest

import berth
from berth.backends.memory import MemoryBackend
from berth.kms import LocalKms
from tests.vectors import make_vectors as kat

from .vectors import make_kms_vector as kv

FRAME = Path(__file__).parent / "vectors" / "kms-local.frame"


def test_kms_frame_format_matches_the_committed_vector() -> None:
    assert kat.frame(kv.sealer()) == FRAME.read_bytes(), (
        "the KmsSealer format changed: if intended, bump its format byte and regenerate the vector "
        "with python -m tests.sealers.vectors.make_kms_vector"
    )


def test_committed_kms_vector_opens_with_the_kek_alone() -> None:
    sealer = berth.KmsSealer(LocalKms(berth.Keyring({kv.KEK_ID: kv.KEK}, kv.KEK_ID)))
    store = berth.Store(MemoryBackend(), identity=kat.IDENTITY, sealer=sealer)
    store.backend.put(f"{kat.IDENTITY}/{kat.KEY}", FRAME.read_bytes())
    parked = store.load(kat.KEY, allow_expired=True)
    assert parked is not None and parked.envelope == kat.envelope()
    assert next(store.list()).sealed_by == f"kms:{kv.KEK_ID}"


def test_pre_release_kms_vector_without_a_state_length_is_refused() -> None:
    legacy = FRAME.with_name("legacy-kms-local.frame").read_bytes()
    assert b'"state_len"' not in legacy
    sealer = berth.KmsSealer(LocalKms(berth.Keyring({kv.KEK_ID: kv.KEK}, kv.KEK_ID)))
    store = berth.Store(MemoryBackend(), identity=kat.IDENTITY, sealer=sealer)
    store.backend.put(f"{kat.IDENTITY}/{kat.KEY}", legacy)
    with pytest.raises(berth.FormatError, match="pre-release"):
        store.load(kat.KEY, allow_expired=True)
