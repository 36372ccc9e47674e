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
    assert copy.kms._client is None
    assert copy.kms.unwrap(wrapped, context=CTX_A) == b"k" * 32
    assert copy.kms.client is not kms.client


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


# --- issue 12.1: a frame wrapped under another KMS key never opens ---------------------------


class _ForgerKms:
    """What an operator with storage write access and Encrypt on *another* key can build: a frame whose
    header and sealed body name the victim's KEK, with the data key wrapped under the other key."""

    def __init__(self, victim_kek: str, other: AwsKms):
        self.key_id = victim_kek
        self.other = other

    def holds(self, key_id: str) -> bool:
        return key_id == self.key_id

    def wrap(self, data_key: bytes, *, context: Any) -> Wrapped:
        real = self.other.wrap(data_key, context=context)
        return Wrapped(self.key_id, real.version, real.ciphertext)

    def unwrap(self, wrapped: Wrapped, *, context: Any) -> bytes:
        raise AssertionError("not used")


def _alias_arn(kms_admin: Any, alias: str) -> str:
    key_arn = str(kms_admin.describe_key(KeyId=alias)["KeyMetadata"]["Arn"])
    return key_arn.split(":key/")[0] + ":" + alias


@pytest.mark.parametrize("form", ["alias", "alias ARN", "key id"])
def test_a_frame_wrapped_under_another_key_is_refused(form: str, kms_admin: Any, aws_env: str) -> None:
    victim = kms_admin.create_key(Description="victim KEK")["KeyMetadata"]
    other = kms_admin.create_key(Description="another tenant's key")["KeyMetadata"]
    alias = f"alias/berth-victim-{victim['KeyId'][:8]}"
    kms_admin.create_alias(AliasName=alias, TargetKeyId=victim["KeyId"])
    kek = {"alias": alias, "alias ARN": _alias_arn(kms_admin, alias), "key id": victim["KeyId"]}[form]
    backend = MemoryBackend()
    honest = _store(_kms(kek, aws_env), backend)
    honest.save("run/real", make_envelope("real"))
    forged = berth.Store(
        backend, identity="tenant-a", sealer=berth.KmsSealer(_ForgerKms(kek, _kms(other["Arn"], aws_env)))
    )
    forged.save("run/forged", make_envelope("forged"))
    assert next(i for i in forged.list() if i.key == "run/forged").sealed_by == f"kms:{kek}"
    fresh = _store(_kms(kek, aws_env), backend)  # a host that never wrapped anything itself
    calls = count_aws_calls(fresh.sealer.kms.client)  # type: ignore[attr-defined]
    for store in (honest, fresh):
        with pytest.raises(berth.IntegrityError, match="cannot be"):
            store.load("run/forged")
        with pytest.raises(berth.IntegrityError):
            store.claim("run/forged")
        parked = store.load("run/real")
        assert parked is not None and parked.envelope.run_id == "real"
    assert calls["Decrypt"] == 1, "only the real frame reached Decrypt"


def test_decrypt_names_the_key_and_a_different_answer_is_refused(aws_key: str, aws_env: str) -> None:
    kms = _kms(aws_key, aws_env)
    wrapped = kms.wrap(b"k" * 32, context=CTX_A)
    seen: list[dict[str, Any]] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        seen.append(dict(params))

    kms.client.meta.events.register("provide-client-params.kms.Decrypt", capture)
    assert kms.unwrap(wrapped, context=CTX_A) == b"k" * 32
    assert seen and seen[-1]["KeyId"] == aws_key

    def lie(parsed: dict[str, Any], **_: Any) -> None:
        parsed["KeyId"] = aws_key[:-1] + ("0" if aws_key[-1] != "0" else "1")

    kms.client.meta.events.register("after-call.kms.Decrypt", lie)
    with pytest.raises(berth.IntegrityError, match="not the trusted"):
        kms.unwrap(wrapped, context=CTX_A)


def test_an_alias_moved_away_needs_its_old_key_in_previous_keys(kms_admin: Any, aws_env: str) -> None:
    old = kms_admin.create_key()["KeyMetadata"]
    new = kms_admin.create_key()["KeyMetadata"]
    alias = f"alias/berth-moved-{old['KeyId'][:8]}"
    kms_admin.create_alias(AliasName=alias, TargetKeyId=old["KeyId"])
    backend = MemoryBackend()
    _store(_kms(alias, aws_env), backend).save("k", make_envelope())
    kms_admin.update_alias(AliasName=alias, TargetKeyId=new["KeyId"])
    with pytest.raises(berth.IntegrityError, match="previous_keys"):
        _store(_kms(alias, aws_env), backend).load("k")
    kept = _kms(alias, aws_env, previous_keys=[old["Arn"]])
    assert _store(kept, backend).load("k") is not None
    assert pickle.loads(pickle.dumps(kept))._previous == (old["Arn"],)
    with pytest.raises(ValueError, match="previous key"):
        _kms(alias, aws_env, previous_keys=[alias])
