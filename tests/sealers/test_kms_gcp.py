"""GcpKms: against an in-process fake of the Cloud KMS client, and the real client over REST to a fake server."""

from __future__ import annotations

import base64
import pickle
from typing import Any

import google_crc32c
import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import kms_v1

import berth
from berth.backends.memory import MemoryBackend
from berth.kms import GcpKms, encode_context
from berth.kms.gcp import crc32c
from berth.testing import make_envelope

from .gcp_fake import FakeKmsClient, rest_server

KEY = "projects/berth-test/locations/global/keyRings/berth/cryptoKeys/kek"
CTX_A = {"berth:identity": "tenant-a", "berth:key": "run/a"}
CTX_B = {"berth:identity": "tenant-a", "berth:key": "run/b"}


@pytest.fixture
def fake() -> FakeKmsClient:
    client = FakeKmsClient()
    client.create_key(KEY)
    return client


def _store(kms: GcpKms, backend: Any = None) -> berth.Store:
    return berth.Store(backend or MemoryBackend(), identity="tenant-a", sealer=berth.KmsSealer(kms))


def test_requests_are_the_real_librarys_types_built_as_the_api_requires(fake: FakeKmsClient) -> None:
    kms = GcpKms(KEY, client=fake)
    wrapped = kms.wrap(b"d" * 32, context=CTX_A)
    assert kms.unwrap(wrapped, context=CTX_A) == b"d" * 32
    enc, dec = fake.requests
    aad = encode_context(CTX_A)
    assert type(enc) is kms_v1.EncryptRequest and type(dec) is kms_v1.DecryptRequest
    # name is the CryptoKey (Cloud KMS then encrypts under its primary version)
    assert kms_v1.KeyManagementServiceClient.parse_crypto_key_path(enc.name) == {
        "project": "berth-test",
        "location": "global",
        "key_ring": "berth",
        "crypto_key": "kek",
    }
    assert dec.name == enc.name == KEY
    assert enc.plaintext == b"d" * 32 and enc.additional_authenticated_data == aad
    assert enc.plaintext_crc32c == google_crc32c.value(b"d" * 32)
    assert enc.additional_authenticated_data_crc32c == google_crc32c.value(aad)
    assert dec.ciphertext == wrapped.ciphertext and dec.additional_authenticated_data == aad
    assert dec.ciphertext_crc32c == google_crc32c.value(wrapped.ciphertext)
    assert dec.additional_authenticated_data_crc32c == google_crc32c.value(aad)
    assert wrapped.key_id == KEY and wrapped.version == "1"
    for req in (enc, dec):
        assert type(req).deserialize(type(req).serialize(req)) == req


def test_context_mismatch_is_refused_by_the_kms(fake: FakeKmsClient) -> None:
    kms = GcpKms(KEY, client=fake)
    wrapped = kms.wrap(b"d" * 32, context=CTX_A)
    with pytest.raises(berth.IntegrityError, match="INVALID_ARGUMENT") as info:
        kms.unwrap(wrapped, context=CTX_B)
    assert info.value.key == "run/b"


def test_store_round_trip_and_one_call_per_save_and_load(fake: FakeKmsClient) -> None:
    store = _store(GcpKms(KEY, client=fake))
    store.save("run/a", make_envelope())
    parked = store.load("run/a")
    assert parked is not None and parked.envelope.run_id == "run-1"
    assert len(fake.requests) == 2
    assert list(store.list())[0].sealed_by == f"kms:{KEY}"
    assert store.sweep() == 0 and store.reseal() == 0
    assert len(fake.requests) == 2


def test_rotated_key_opens_frames_of_older_versions(fake: FakeKmsClient) -> None:
    store = _store(GcpKms(KEY, client=fake))
    store.save("old", make_envelope())
    fake.rotate(KEY)
    store.save("new", make_envelope())
    assert store.load("old") is not None and store.load("new") is not None
    assert store.reseal() == 0, "same CryptoKey: Cloud KMS rotates versions under one name"


def test_frame_under_another_crypto_key_is_refused_without_a_call(fake: FakeKmsClient) -> None:
    other = fake.create_key(KEY.replace("kek", "other"))
    backend = MemoryBackend()
    _store(GcpKms(other, client=fake), backend).save("k", make_envelope())
    fake.requests.clear()
    with pytest.raises(berth.IntegrityError, match="does not hold"):
        _store(GcpKms(KEY, client=fake), backend).load("k")
    assert fake.requests == []


@pytest.mark.parametrize(
    "error",
    [gexc.ServiceUnavailable("down"), gexc.PermissionDenied("no"), gexc.FailedPrecondition("disabled")],
    ids=lambda e: type(e).__name__,
)
def test_kms_down_or_refusing_is_backend_error(fake: FakeKmsClient, error: Exception) -> None:
    backend = MemoryBackend()
    kms = GcpKms(KEY, client=fake)
    _store(kms, backend).save("k", make_envelope("kept"))
    fake.fail_with = error
    with pytest.raises(berth.BackendError, match=type(error).__name__) as info:
        _store(kms, backend).save("k", make_envelope("new"))
    assert "'tenant-a'" in str(info.value) and "'k'" in str(info.value)
    with pytest.raises(berth.BackendError):
        _store(kms, backend).load("k")
    fake.fail_with = None
    parked = _store(kms, backend).load("k")
    assert parked is not None and parked.envelope.run_id == "kept"


class _CorruptingFake(FakeKmsClient):
    def decrypt(self, request: kms_v1.DecryptRequest, *, timeout: float | None = None) -> kms_v1.DecryptResponse:
        resp = super().decrypt(request, timeout=timeout)
        resp.plaintext_crc32c = resp.plaintext_crc32c + 1
        return resp


def test_a_response_failing_its_checksum_is_backend_error() -> None:
    fake = _CorruptingFake()
    fake.create_key(KEY)
    kms = GcpKms(KEY, client=fake)
    with pytest.raises(berth.BackendError, match="checksum"):
        kms.unwrap(kms.wrap(b"d" * 32, context=CTX_A), context=CTX_A)


class _MinimalFake:
    """A bare-bones fake such as a host might write: AAD honoured, no checksums, no versions, no timeout."""

    def __init__(self) -> None:
        self.inner = FakeKmsClient()
        self.inner.create_key(KEY)

    def encrypt(self, request: kms_v1.EncryptRequest) -> kms_v1.EncryptResponse:
        return kms_v1.EncryptResponse(ciphertext=self.inner.encrypt(request).ciphertext)

    def decrypt(self, request: kms_v1.DecryptRequest) -> kms_v1.DecryptResponse:
        return kms_v1.DecryptResponse(plaintext=self.inner.decrypt(request).plaintext)


def test_a_client_that_answers_without_checksums_still_works() -> None:
    store = _store(GcpKms(KEY, client=_MinimalFake()))
    store.save("k", make_envelope())
    assert store.load("k") is not None


def test_real_client_over_rest_builds_the_api_requests(fake: FakeKmsClient) -> None:
    with rest_server(fake) as (url, bodies):
        client = kms_v1.KeyManagementServiceClient(
            credentials=AnonymousCredentials(), transport="rest", client_options={"api_endpoint": url}
        )
        store = _store(GcpKms(KEY, client=client))
        store.save("run/a", make_envelope())
        assert store.load("run/a") is not None
        enc, dec = bodies
        aad = encode_context(CTX_A)
        assert enc["path"].startswith(f"/v1/{KEY}:encrypt") and dec["path"].startswith(f"/v1/{KEY}:decrypt")
        assert base64.b64decode(enc["additionalAuthenticatedData"]) == aad
        assert len(base64.b64decode(enc["plaintext"])) == 32
        assert int(enc["plaintextCrc32c"]) == google_crc32c.value(base64.b64decode(enc["plaintext"]))
        assert int(dec["ciphertextCrc32c"]) == google_crc32c.value(base64.b64decode(dec["ciphertext"]))
        assert int(dec["additionalAuthenticatedDataCrc32c"]) == google_crc32c.value(aad)
        # over REST a refused decrypt arrives as a 400 BadRequest: still an IntegrityError
        kms = GcpKms(KEY, client=client)
        with pytest.raises(berth.IntegrityError, match="INVALID_ARGUMENT"):
            kms.unwrap(kms.wrap(b"d" * 32, context=CTX_A), context=CTX_B)


def test_pickles_without_a_real_client() -> None:
    client = kms_v1.KeyManagementServiceClient(
        credentials=AnonymousCredentials(), transport="rest", client_options={"api_endpoint": "http://127.0.0.1:9"}
    )
    copy = pickle.loads(pickle.dumps(berth.KmsSealer(GcpKms(KEY, client=client))))
    assert copy.key_id == KEY and copy.kms._client is None


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "projects/p/locations/l/keyRings/r",
        KEY + "/cryptoKeyVersions/1",
        "gcpkms://" + KEY,
        "projects//locations/l/keyRings/r/cryptoKeys/k",
    ],
)
def test_bad_key_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="CryptoKey"):
        GcpKms(bad)


def test_crc32c_matches_google_crc32c() -> None:
    from berth.kms.gcp import _pure_crc32c

    for data in (b"", b"123456789", bytes(range(256)) * 5):
        assert crc32c(data) == _pure_crc32c(data) == google_crc32c.value(data)
