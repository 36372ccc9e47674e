"""AwsKms against a moto server: encryption context, recorded key ARNs, error mapping, pickling."""

from __future__ import annotations

import pickle
import socket
from typing import Any

import pytest

import berth
from berth.backends.memory import MemoryBackend
from berth.kms import AwsKms, Wrapped
from berth.testing import make_envelope

from .conftest import REGION, count_aws_calls

pytestmark = pytest.mark.s3

CTX_A = {"berth:identity": "tenant-a", "berth:key": "run/a"}
CTX_B = {"berth:identity": "tenant-a", "berth:key": "run/b"}


def _kms(key_id: str, url: str, **kw: Any) -> AwsKms:
    return AwsKms(key_id, region_name=REGION, endpoint_url=url, **kw)


def _store(kms: AwsKms, backend: Any = None) -> berth.Store:
    return berth.Store(backend or MemoryBackend(), identity="tenant-a", sealer=berth.KmsSealer(kms))


def test_wrap_unwrap_round_trip_under_its_context(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    assert wrapped.key_id == aws_key and wrapped.version == aws_key
    assert kms.unwrap(wrapped, context=CTX_A) == b"k" * 32


def test_context_mismatch_is_refused_by_the_kms(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    calls = count_aws_calls(kms.client)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    with pytest.raises(berth.IntegrityError, match="InvalidCiphertextException") as info:
        kms.unwrap(wrapped, context=CTX_B)
    assert info.value.key == "run/b"
    assert calls["Decrypt"] == 1


def test_wrapped_key_moved_to_another_runs_frame_does_not_open(aws_key: str, aws_env: str) -> None:
    from .test_kms_sealer import _parse, _raw, _rebuild, _split

    store = _store(_kms(aws_key, aws_env))
    store.save("run/a", make_envelope("a"))
    store.save("run/b", make_envelope("b"))
    wrapped_a, _ = _parse(memoryview(_split(_raw(store, "run/a"))[1]))
    head_b, body_b = _split(_raw(store, "run/b"))
    store.backend.put("tenant-a/run/b", head_b + _rebuild(body_b, wrapped_a))
    with pytest.raises(berth.IntegrityError, match="refuses to unwrap"):
        store.load("run/b")
    assert store.load("run/a") is not None


def test_one_encrypt_per_save_one_decrypt_per_load_none_for_list_and_sweep(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    calls = count_aws_calls(kms.client)
    store = _store(kms)
    store.save("k", make_envelope())
    assert dict(calls) == {"Encrypt": 1}
    assert store.claim("k") is not None
    assert dict(calls) == {"Encrypt": 1, "Decrypt": 1}
    store.save("k", make_envelope())
    calls.clear()
    assert len(list(store.list())) == 1 and store.sweep() == 0 and store.reseal() == 0
    assert dict(calls) == {}


def test_frame_under_another_kek_is_refused_without_a_call(aws_key: str, kms_admin: Any, aws_env: str) -> None:
    backend = MemoryBackend()
    _store(_kms(aws_key, aws_env), backend).save("k", make_envelope())
    other = _kms(str(kms_admin.create_key()["KeyMetadata"]["Arn"]), aws_env)
    calls = count_aws_calls(other.client)
    with pytest.raises(berth.IntegrityError, match="does not hold"):
        _store(other, backend).load("k")
    assert dict(calls) == {}


def test_alias_moved_to_a_new_key_still_opens_old_frames(kms_admin: Any, aws_env: str) -> None:
    old = kms_admin.create_key()["KeyMetadata"]["KeyId"]
    new = kms_admin.create_key()["KeyMetadata"]["KeyId"]
    kms_admin.create_alias(AliasName="alias/berth-rotating", TargetKeyId=old)
    store = _store(_kms("alias/berth-rotating", aws_env))
    store.save("k", make_envelope())
    assert next(store.list()).sealed_by == "kms:alias/berth-rotating"
    kms_admin.update_alias(AliasName="alias/berth-rotating", TargetKeyId=new)
    assert store.load("k") is not None
    store.save("k2", make_envelope())
    wrapped = _kms("alias/berth-rotating", aws_env).wrap(b"x" * 32, context=CTX_A)
    assert wrapped.version.endswith(":key/" + new)


def test_a_recorded_key_arn_that_cannot_be_this_kek_is_refused_without_a_call(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    calls = count_aws_calls(kms.client)
    for version in ("", "alias/other", aws_key[:-1] + ("0" if aws_key[-1] != "0" else "1")):
        with pytest.raises(berth.IntegrityError, match="cannot be"):
            kms.unwrap(wrapped._replace(version=version), context=CTX_A)
    with pytest.raises(berth.IntegrityError, match="not this AwsKms"):
        kms.unwrap(wrapped._replace(key_id="alias/other"), context=CTX_A)
    assert dict(calls) == {}


def test_a_changed_ciphertext_blob_is_integrity_error(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    calls = count_aws_calls(kms.client)
    # Every position: moto's blob starts with the key id, so early flips make moto answer
    # AccessDenied (a key that does not exist). The key berth asked for is enabled, so the
    # refusal was about this ciphertext: still a frame that cannot be opened.
    for pos in range(0, len(wrapped.ciphertext), 5):
        blob = bytearray(wrapped.ciphertext)
        blob[pos] ^= 0x01
        with pytest.raises(berth.IntegrityError):
            kms.unwrap(Wrapped(wrapped.key_id, wrapped.version, bytes(blob)), context=CTX_A)
    assert calls["DescribeKey"] >= 1, "the AccessDenied path was exercised"


def test_access_denied_for_a_disabled_key_is_backend_error(aws_key: str, kms_admin: Any, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    kms_admin.disable_key(KeyId=aws_key.rsplit("/", 1)[1])
    blob = bytearray(wrapped.ciphertext)
    blob[0] ^= 0x01  # moto: AccessDenied; and the key itself is disabled, so KMS refuses us
    with pytest.raises(berth.BackendError, match="AccessDeniedException"):
        kms.unwrap(Wrapped(wrapped.key_id, wrapped.version, bytes(blob)), context=CTX_A)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_kms_down_is_backend_error_naming_identity_and_key(aws_key: str, aws_env: str) -> None:
    backend = MemoryBackend()
    _store(_kms(aws_key, aws_env), backend).save("k", make_envelope("kept"))
    down = _kms(aws_key, f"http://127.0.0.1:{_closed_port()}", max_attempts=1, timeout=1.0)
    store = _store(down, backend)
    with pytest.raises(berth.BackendError) as info:
        store.save("k", make_envelope("new"))
    assert "'tenant-a'" in str(info.value) and "'k'" in str(info.value)
    with pytest.raises(berth.BackendError, match="unwrap"):
        store.load("k")
    parked = _store(_kms(aws_key, aws_env), backend).load("k")
    assert parked is not None and parked.envelope.run_id == "kept"


def test_kms_refusing_to_wrap_is_backend_error(kms_admin: Any, aws_env: str) -> None:
    missing = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    with pytest.raises(berth.BackendError, match="NotFoundException"):
        _store(_kms(missing, aws_env)).save("k", make_envelope())


def test_pickled_client_recreates_its_boto3_client(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    copy = pickle.loads(pickle.dumps(berth.KmsSealer(kms)))
    assert copy.kms._client is None  # type: ignore[attr-defined]
    assert copy.kms.unwrap(wrapped, context=CTX_A) == b"k" * 32
    assert copy.kms.client is not kms.client  # type: ignore[attr-defined]


def test_an_injected_client_travels_as_its_endpoint_and_region(aws_key: str, kms_admin: Any) -> None:
    kms = AwsKms(aws_key, client=kms_admin)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    copy = pickle.loads(pickle.dumps(kms))
    assert copy.client.meta.endpoint_url == kms_admin.meta.endpoint_url
    assert copy.unwrap(wrapped, context=CTX_A) == b"k" * 32


def test_region_comes_from_a_key_arn(aws_key: str, aws_env: str) -> None:
    assert AwsKms(aws_key, endpoint_url=aws_env).client.meta.region_name == REGION


@pytest.mark.parametrize(
    "bad", ["", "alias/", "arn:aws:s3:::bucket", "not a key", "alias/has space", "12345678-1234-1234-1234-12345678"]
)
def test_bad_key_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="AwsKms key"):
        AwsKms(bad)


@pytest.mark.parametrize(
    "good",
    [
        "alias/berth",
        "1234abcd-12ab-34cd-56ef-1234567890ab",
        "mrk-1234abcd12ab34cd56ef1234567890ab",
        "arn:aws:kms:us-east-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "arn:aws:kms:us-east-2:111122223333:alias/berth",
    ],
)
def test_good_key_ids_are_accepted_without_a_call(good: str) -> None:
    kms = AwsKms(good)
    assert kms.key_id == good and kms.holds(good) and kms._client is None
