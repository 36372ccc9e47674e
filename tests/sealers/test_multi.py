"""MultiSealer and migration with store.reseal(): plaintext -> keyring -> KMS, KEK -> KEK."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import berth
from berth._codec import build_aad, peek_header
from berth.backends.memory import MemoryBackend
from berth.kms import AwsKms, LocalKms
from berth.testing import RecordingBackend, make_envelope

from .conftest import REGION, CountingKms


def _store(backend: Any, sealer: Any, **kw: Any) -> berth.Store:
    return berth.Store(backend, identity="tenant-a", sealer=sealer, **kw)


def _bodies(store: berth.Store) -> dict[str, berth.Envelope]:
    """Every parked key's opened envelope, every field and the raw state as parked."""
    out = {}
    for item in store.list():
        parked = store.load(item.key, allow_expired=True)
        assert parked is not None
        out[item.key] = parked.envelope
    return out


def test_seals_with_the_primary_and_reports_its_name_and_key() -> None:
    kms = berth.KmsSealer(LocalKms(berth.Keyring.generate()))
    aes = berth.AesGcmSealer(berth.Keyring.generate())
    multi = berth.MultiSealer(kms, aes)
    assert (multi.name, multi.key_id) == ("kms", kms.key_id)
    assert multi.members == (kms, aes) and multi.primary is kms
    assert multi.can_open("kms", kms.key_id) and multi.can_open("aes-gcm", aes.key_id)
    assert not multi.can_open("aes-gcm", kms.key_id) and not multi.can_open("plaintext", "sha256")
    assert multi.seal(b"x", aad=b"a")[:1] == b"K"
    assert isinstance(multi, berth.Sealer)


def test_routes_each_frame_to_the_member_it_names_without_needless_kms_calls() -> None:
    backend = MemoryBackend()
    aes = berth.AesGcmSealer(berth.Keyring.generate())
    counting = CountingKms(LocalKms(berth.Keyring.generate()))
    _store(backend, aes).save("old", make_envelope("old"))
    store = _store(backend, berth.MultiSealer(berth.KmsSealer(counting), aes))
    store.save("new", make_envelope("new"))
    counting.calls.clear()
    old = store.load("old")
    assert old is not None and old.envelope.run_id == "old"
    assert counting.calls == {}
    new = store.load("new")
    assert new is not None and new.envelope.run_id == "new"
    assert counting.calls == {"unwrap": 1}
    assert {i.key: i.sealed_by.split(":")[0] for i in store.list()} == {"old": "aes-gcm", "new": "kms"}


def test_opens_bytes_sealed_outside_a_store_by_any_member() -> None:
    aes = berth.AesGcmSealer(berth.Keyring.generate())
    counting = CountingKms(LocalKms(berth.Keyring.generate()))
    kms = berth.KmsSealer(counting)
    multi = berth.MultiSealer(kms, aes)
    assert multi.open(aes.seal(b"aes", aad=b"x"), aad=b"x") == b"aes"
    assert counting.calls == {}, "KMS bytes are recognised before any call"
    assert multi.open(kms.seal(b"kms", aad=b"x"), aad=b"x") == b"kms"
    with pytest.raises(berth.IntegrityError):
        multi.open(aes.seal(b"aes", aad=b"x"), aad=b"y")
    with pytest.raises(berth.IntegrityError):
        multi.open(b"garbage", aad=b"x")


def test_a_frame_no_member_holds_is_integrity_error_naming_its_key() -> None:
    backend = MemoryBackend()
    stranger = berth.AesGcmSealer(berth.Keyring.generate())
    _store(backend, stranger).save("k", make_envelope())
    multi = berth.MultiSealer(
        berth.KmsSealer(LocalKms(berth.Keyring.generate())), berth.AesGcmSealer(berth.Keyring.generate())
    )
    with pytest.raises(berth.IntegrityError, match=stranger.key_id):
        _store(backend, multi).load("k")
    with pytest.raises(berth.IntegrityError, match="no member"):
        multi.open(b"\x01", aad=build_aad(_frame_head(stranger), "tenant-a", "k"))


def _frame_head(sealer: Any) -> bytes:
    store = _store(MemoryBackend(), sealer)
    store.save("k", make_envelope())
    found = store.backend.get("tenant-a/k")
    assert found is not None
    _, end = peek_header(found[0], "tenant-a", "k")
    return bytes(found[0][:end])


def test_nests_flat_pickles_and_refuses_non_sealers() -> None:
    a = berth.AesGcmSealer(berth.Keyring.generate())
    k = berth.KmsSealer(LocalKms(berth.Keyring.generate()))
    multi = berth.MultiSealer(berth.MultiSealer(k, a), berth.PlaintextSealer())
    assert len(multi.members) == 3 and multi.primary is k
    copy = pickle.loads(pickle.dumps(multi))
    assert copy.key_id == k.key_id and copy.open(k.seal(b"x", aad=b"a"), aad=b"a") == b"x"
    with pytest.raises(TypeError):
        berth.MultiSealer(k, object())  # type: ignore[arg-type]


# --- migration ---------------------------------------------------------------------------------


def test_reseal_plaintext_to_keyring_to_kms_keeps_every_envelope_byte_identical() -> None:
    backend = MemoryBackend()
    plain = _store(backend, berth.PlaintextSealer())
    envs = {f"run/{i}": make_envelope(f"r{i}", provider_state={"i": i, "text": "é" * i}) for i in range(12)}
    for key, env in envs.items():
        plain.save(key, env)
    original = _bodies(plain)

    keyring = berth.Keyring.generate()
    aes = berth.AesGcmSealer(keyring)
    with pytest.raises(berth.IntegrityError):
        _store(backend, aes).load("run/0")
    step1 = _store(backend, aes, accept_plaintext=True).reseal()
    assert (step1, step1.skipped, step1.failed) == (12, 0, 0)
    assert {i.sealed_by for i in _store(backend, aes).list()} == {f"aes-gcm:{keyring.primary}"}
    assert _bodies(_store(backend, aes)) == original

    counting = CountingKms(LocalKms(berth.Keyring.generate()))
    kms = berth.KmsSealer(counting)
    step2 = _store(backend, berth.MultiSealer(kms, aes)).reseal()
    assert (step2, step2.skipped, step2.failed) == (12, 0, 0)
    assert counting.calls == {"wrap": 12}, "moving off a keyring unwraps nothing"
    strict = _store(backend, kms)
    assert {i.sealed_by for i in strict.list()} == {f"kms:{kms.key_id}"}
    assert _bodies(strict) == original
    for key, env in envs.items():
        parked = strict.load(key)
        assert parked is not None
        assert parked.envelope.provider_state == env.provider_state
        assert parked.envelope.replace(created_at=None) == env
    assert _store(backend, kms).reseal() == 0


def test_reseal_reports_moved_skipped_and_failed() -> None:
    backend = MemoryBackend()
    old = berth.AesGcmSealer(berth.Keyring.generate())
    lost = berth.AesGcmSealer(berth.Keyring.generate())
    new = berth.KmsSealer(LocalKms(berth.Keyring.generate()))
    _store(backend, old).save("a", make_envelope("a"))
    _store(backend, old).save("b", make_envelope("b"))
    _store(backend, lost).save("c", make_envelope("c"))
    _store(backend, new).save("d", make_envelope("d"))
    writer = _store(backend, old)
    racing = RecordingBackend(backend, before_conditional_put=lambda name: writer.save("a", make_envelope("a2")))
    report = _store(racing, berth.MultiSealer(new, old)).reseal()
    assert (int(report), report.moved, report.skipped, report.failed) == (1, 1, 1, 1)
    assert repr(report) == "ResealReport(moved=1, skipped=1, failed=1)"
    by_key = {i.key: i.sealed_by for i in _store(backend, new).list()}
    assert by_key == {
        "a": f"aes-gcm:{old.key_id}",  # the concurrent save won
        "b": f"kms:{new.key_id}",
        "c": f"aes-gcm:{lost.key_id}",  # left in place, untouched
        "d": f"kms:{new.key_id}",
    }
    parked = _store(backend, old).load("a")
    assert parked is not None and parked.envelope.run_id == "a2"


@pytest.mark.s3
def test_reseal_from_one_aws_kek_to_another(kms_admin: Any, aws_env: str) -> None:
    arn_a = kms_admin.create_key()["KeyMetadata"]["Arn"]
    arn_b = kms_admin.create_key()["KeyMetadata"]["Arn"]
    kek_a = berth.KmsSealer(AwsKms(arn_a, region_name=REGION, endpoint_url=aws_env))
    kek_b = berth.KmsSealer(AwsKms(arn_b, region_name=REGION, endpoint_url=aws_env))
    backend = MemoryBackend()
    for i in range(3):
        _store(backend, kek_a).save(f"k{i}", make_envelope(f"r{i}"))
    original = _bodies(_store(backend, kek_a))
    with pytest.raises(berth.IntegrityError):
        _store(backend, kek_b).load("k0")
    report = _store(backend, berth.MultiSealer(kek_b, kek_a)).reseal()
    assert (report.moved, report.skipped, report.failed) == (3, 0, 0)
    assert _bodies(_store(backend, kek_b)) == original
    with pytest.raises(berth.IntegrityError):
        _store(backend, kek_a).load("k0")
