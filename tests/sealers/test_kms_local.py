"""LocalKms: AES-256-GCM wrapping under keys derived from a berth.Keyring."""

from __future__ import annotations

import pickle

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import berth
from berth.kms import Kms, LocalKms, Wrapped, encode_context

CTX = {"berth:identity": "tenant-a", "berth:key": "run/a"}


def test_wraps_under_the_primary_and_unwraps_under_any_held_key() -> None:
    keyring = berth.Keyring.generate()
    old = LocalKms(keyring)
    wrapped = old.wrap(b"d" * 32, context=CTX)
    assert wrapped.key_id == keyring.primary and wrapped.version == "" and len(wrapped.ciphertext) == 60
    new = LocalKms(keyring.rotate())
    assert new.key_id != old.key_id and new.holds(old.key_id)
    assert new.unwrap(wrapped, context=CTX) == b"d" * 32
    assert new.wrap(b"d" * 32, context=CTX).key_id == new.key_id
    assert isinstance(new, Kms)


def test_refusals_are_integrity_errors_naming_the_frame() -> None:
    kms = LocalKms(berth.Keyring.generate())
    wrapped = kms.wrap(b"d" * 32, context=CTX)
    cases = [
        (wrapped, {**CTX, "berth:key": "run/b"}, "refuses to unwrap"),
        (wrapped._replace(key_id="nope"), CTX, "does not hold"),
        (wrapped._replace(ciphertext=wrapped.ciphertext[:-1]), CTX, "59 bytes"),
        (wrapped._replace(ciphertext=bytes(60)), CTX, "refuses to unwrap"),
    ]
    for w, ctx, message in cases:
        with pytest.raises(berth.IntegrityError, match=message) as info:
            kms.unwrap(w, context=ctx)
        assert info.value.key == ctx["berth:key"] and info.value.identity == "tenant-a"


def test_the_wrapping_key_is_derived_not_the_keyring_key_itself() -> None:
    keyring = berth.Keyring.generate()
    wrapped: Wrapped = LocalKms(keyring).wrap(b"d" * 32, context=CTX)
    raw = AESGCM(keyring.key(keyring.primary) or b"")
    with pytest.raises(InvalidTag):
        raw.decrypt(wrapped.ciphertext[:12], wrapped.ciphertext[12:], encode_context(CTX))


def test_context_encoding_is_canonical_and_unambiguous() -> None:
    assert encode_context({"a": "b", "c": "d"}) == encode_context({"c": "d", "a": "b"})
    assert encode_context({"a": "bc"}) != encode_context({"ab": "c"})


def test_pickles_and_refuses_what_is_not_a_keyring() -> None:
    kms = LocalKms(berth.Keyring.generate())
    copy = pickle.loads(pickle.dumps(kms))
    assert copy.unwrap(kms.wrap(b"d" * 32, context=CTX), context=CTX) == b"d" * 32
    assert "LocalKms(Keyring(primary=" in repr(copy)
    with pytest.raises(TypeError):
        LocalKms(b"0" * 32)  # type: ignore[arg-type]
