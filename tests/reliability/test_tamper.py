"""Tampering, exhaustively: every bit flip, truncation and append of a sealed frame is refused.

Frames are planted with `store.backend.put` on a memory store, so a sweep of
every single-bit flip of a few-KiB frame takes seconds. The full bit sweep is
`slow`; CI flips one bit in every byte.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

import berth
from berth.backends.memory import MemoryBackend

from ._common import Result, big_envelope, make_sealer, sealer_names

IDENTITY = "tamper"
KEY = "org/repo#42"


def _store(sealer_name: str, sealer: berth.Sealer | None = None, identity: str = IDENTITY) -> berth.Store:
    return berth.Store(MemoryBackend(), identity=identity, sealer=sealer or make_sealer(sealer_name))


def sealed_frame(store: berth.Store, key: str = KEY, envelope: berth.Envelope | None = None) -> bytes:
    """Save `envelope` under `key` and return the exact frame bytes the backend holds."""
    store.save(key, envelope or big_envelope())
    found = store.backend.get(f"{store.identity}/{key}")
    assert found is not None
    return bytes(found[0])


def mutations(frame: bytes, *, every_bit: bool, seed: int = 7) -> Iterator[tuple[str, bytes]]:
    """(description, mutated frame): bit flips, every truncation, appended garbage."""
    n = len(frame)
    for i in range(n):
        bits = range(8) if every_bit else (i % 8,)
        for b in bits:
            m = bytearray(frame)
            m[i] ^= 1 << b
            yield f"flip byte {i} bit {b}", bytes(m)
    for length in range(n):
        yield f"truncate to {length}", frame[:length]
    rng = random.Random(seed)
    tails = [b"\x00", b"\xff", b"\n", b" ", frame[-16:], frame[-32:], frame, os.urandom(1)]
    tails += [rng.randbytes(rng.randint(1, 256)) for _ in range(24)]
    for j, tail in enumerate(tails):
        yield f"append garbage #{j} ({len(tail)} bytes)", frame + tail
    for _ in range(8):  # garbage replacing the body, keeping the header
        cut = rng.randint(60, n - 1)
        yield f"replace tail from {cut}", frame[:cut] + rng.randbytes(n - cut)


def run_tamper(sealer_name: str, *, every_bit: bool) -> Result:
    """Plant every mutation of one sealed frame; each load must raise IntegrityError or FormatError."""
    result = Result("tamper: bit flips, truncations, appends", sealer_name)
    store = _store(sealer_name)
    frame = sealed_frame(store)
    name = f"{IDENTITY}/{KEY}"
    put = store.backend.put
    for what, data in mutations(frame, every_bit=every_bit):
        result.trials += 1
        put(name, data)
        try:
            parked = store.load(KEY, allow_expired=True)
        except (berth.IntegrityError, berth.FormatError):
            continue
        except Exception as exc:  # noqa: BLE001 - any other exception is a finding
            result.fail(f"{what}: raised {type(exc).__name__}: {exc}")
            continue
        result.fail(f"{what}: returned {'nothing' if parked is None else 'an envelope'}")
    put(name, frame)
    parked = store.load(KEY)  # the untouched frame still opens: the sweep proved something
    assert parked is not None and parked.envelope.run_id == "run-1"
    return result


@pytest.mark.parametrize("sealer_name", sealer_names())
def test_every_byte_flipped_truncated_or_appended_is_refused(sealer_name: str) -> None:
    result = run_tamper(sealer_name, every_bit=False)
    assert result.trials > 7000
    result.check()


@pytest.mark.slow
@pytest.mark.parametrize("sealer_name", sealer_names())
def test_every_bit_flip_is_refused(sealer_name: str) -> None:
    result = run_tamper(sealer_name, every_bit=True)
    assert result.trials > 28000
    result.check()


@pytest.mark.parametrize("sealer_name", sealer_names())
def test_tampered_frame_is_left_in_place_by_claim(sealer_name: str) -> None:
    store = _store(sealer_name)
    frame = bytearray(sealed_frame(store))
    frame[-5] ^= 0x10
    store.backend.put(f"{IDENTITY}/{KEY}", bytes(frame))
    with pytest.raises(berth.IntegrityError):
        store.claim(KEY)
    found = store.backend.get(f"{IDENTITY}/{KEY}")
    assert found is not None and bytes(found[0]) == bytes(frame)


@pytest.mark.parametrize("sealer_name", sealer_names())
def test_frame_swapped_between_keys_is_refused(sealer_name: str) -> None:
    store = _store(sealer_name)
    a = sealed_frame(store, "a/1", big_envelope("run-a"))
    b = sealed_frame(store, "a/2", big_envelope("run-b"))
    store.backend.put(f"{IDENTITY}/a/1", b)
    store.backend.put(f"{IDENTITY}/a/2", a)
    store.backend.put(f"{IDENTITY}/a/3", a)
    for key in ("a/1", "a/2", "a/3"):
        with pytest.raises(berth.IntegrityError):
            store.load(key)
        with pytest.raises(berth.IntegrityError):
            store.claim(key)


@pytest.mark.parametrize("sealer_name", sealer_names())
def test_frame_swapped_between_identities_is_refused(sealer_name: str) -> None:
    sealer = make_sealer(sealer_name)
    backend = MemoryBackend()
    alice = berth.Store(backend, identity="alice", sealer=sealer)
    bob = berth.Store(backend, identity="bob", sealer=sealer)
    frame = sealed_frame(alice, KEY)
    backend.put(f"bob/{KEY}", frame)
    with pytest.raises(berth.IntegrityError):
        bob.load(KEY)
    # the header rewritten to name bob does not help: the header is associated data
    forged = frame.replace(b'"identity":"alice"', b'"identity":"bob"  ', 1)
    assert forged != frame
    backend.put(f"bob/{KEY}", forged)
    with pytest.raises((berth.IntegrityError, berth.FormatError)):
        bob.load(KEY)


@pytest.mark.parametrize("sealer_name", [s for s in sealer_names() if s != "plaintext"])
def test_frame_from_a_store_with_another_key_is_refused(sealer_name: str) -> None:
    one, two = _store(sealer_name), _store(sealer_name)
    two.backend.put(f"{IDENTITY}/{KEY}", sealed_frame(one))
    with pytest.raises(berth.IntegrityError):
        two.load(KEY)


def test_same_key_id_with_other_key_material_is_refused() -> None:
    k1, k2 = (os.urandom(32) for _ in range(2))
    one = _store("aes-gcm", berth.AesGcmSealer(berth.Keyring({"k": k1}, "k")))
    two = _store("aes-gcm", berth.AesGcmSealer(berth.Keyring({"k": k2}, "k")))
    two.backend.put(f"{IDENTITY}/{KEY}", sealed_frame(one))
    with pytest.raises(berth.IntegrityError):
        two.load(KEY)


@pytest.mark.parametrize("sealer_name", [s for s in sealer_names() if s != "plaintext"])
def test_downgrade_and_upgrade_between_plaintext_and_sealed_are_refused(sealer_name: str) -> None:
    sealed, plain = _store(sealer_name), _store("plaintext")
    sealed.backend.put(f"{IDENTITY}/{KEY}", sealed_frame(plain))
    with pytest.raises(berth.IntegrityError):
        sealed.load(KEY)
    plain.backend.put(f"{IDENTITY}/{KEY}", sealed_frame(_store(sealer_name)))
    with pytest.raises(berth.IntegrityError):
        plain.load(KEY)


def test_pushed_out_deadline_in_the_header_is_refused() -> None:
    from datetime import datetime, timezone

    store = _store("aes-gcm")
    deadline = datetime(2026, 1, 1, tzinfo=timezone.utc)
    frame = sealed_frame(store, envelope=big_envelope(deadline=deadline))
    assert b"2026-01-01T00:00:00Z" in frame
    forged = frame.replace(b"2026-01-01T00:00:00Z", b"2099-01-01T00:00:00Z", 1)
    store.backend.put(f"{IDENTITY}/{KEY}", forged)
    with pytest.raises(berth.IntegrityError):
        store.load(KEY, allow_expired=True)
