"""KmsSealer: envelope encryption, data keys bound to their frame, refusals without KMS calls."""

from __future__ import annotations

import functools
import pickle
import uuid
from datetime import timedelta
from typing import Any

import pytest

import berth
from berth._codec import build_aad, peek_header
from berth._kms_sealer import _parse, wrap_context
from berth.backends.memory import MemoryBackend
from berth.backends.sqlite import SqliteBackend
from berth.kms import AwsKms, LocalKms, Wrapped
from berth.testing import SECRET, FakeClock, StoreContract, make_envelope

from .conftest import REGION, CountingKms


def _sealer(keyring: berth.Keyring | None = None) -> tuple[berth.KmsSealer, CountingKms]:
    kms = CountingKms(LocalKms(keyring or berth.Keyring.generate()))
    return berth.KmsSealer(kms), kms


def _store(sealer: Any, backend: Any = None, **kw: Any) -> berth.Store:
    return berth.Store(backend or MemoryBackend(), identity="tenant-a", sealer=sealer, **kw)


def _raw(store: berth.Store, key: str) -> bytes:
    found = store.backend.get(f"{store.identity}/{key}")
    assert found is not None
    return bytes(found[0])


def _split(frame: bytes) -> tuple[bytes, bytes]:
    """A frame's head and its sealed body."""
    _, end = peek_header(frame, "?", "?")
    return frame[:end], frame[end:]


def _rebuild(sealed: bytes, wrapped: Wrapped) -> bytes:
    """`sealed` with its wrapped key (and KEK fields) replaced by `wrapped`."""
    _, start = _parse(memoryview(sealed))
    kek, ver = wrapped.key_id.encode(), wrapped.version.encode()
    prefix = b"".join(
        (b"K\x01", bytes((len(kek),)), kek, bytes((len(ver),)), ver, len(wrapped.ciphertext).to_bytes(2, "big"))
    )
    return prefix + wrapped.ciphertext + sealed[start:]


# --- the contract under KmsSealer ---------------------------------------------------------


class TestLocalKmsOnMemory(StoreContract):
    cross_process = False

    @pytest.fixture
    def backend_opener(self, request: pytest.FixtureRequest) -> Any:
        return functools.partial(MemoryBackend.from_url, f"memory://kms-{uuid.uuid4().hex}")

    @pytest.fixture
    def sealer(self) -> berth.Sealer:
        return berth.KmsSealer(LocalKms(berth.Keyring.generate()))


class TestLocalKmsOnSqlite(StoreContract):
    @pytest.fixture
    def backend_opener(self, tmp_path: Any) -> Any:
        return functools.partial(SqliteBackend, str(tmp_path / "berth.db"))

    @pytest.fixture
    def sealer(self) -> berth.Sealer:
        return berth.KmsSealer(LocalKms(berth.Keyring.generate()))


@pytest.mark.s3
class TestAwsKmsOnMemory(StoreContract):
    cross_process = False

    @pytest.fixture
    def backend_opener(self, request: pytest.FixtureRequest) -> Any:
        return functools.partial(MemoryBackend.from_url, f"memory://awskms-{uuid.uuid4().hex}")

    @pytest.fixture
    def sealer(self, aws_key: str, aws_env: str) -> berth.Sealer:
        return berth.KmsSealer(AwsKms(aws_key, region_name=REGION, endpoint_url=aws_env))


@pytest.mark.s3
class TestAwsKmsOnSqlite(StoreContract):
    process_race_keys = 100

    @pytest.fixture
    def backend_opener(self, tmp_path: Any) -> Any:
        return functools.partial(SqliteBackend, str(tmp_path / "berth.db"))

    @pytest.fixture
    def sealer(self, aws_key: str, aws_env: str) -> berth.Sealer:
        return berth.KmsSealer(AwsKms(aws_key, region_name=REGION, endpoint_url=aws_env))


# --- sealing ---------------------------------------------------------------------------------


class _KeyRecorder(CountingKms):
    def __init__(self, inner: Any):
        super().__init__(inner)
        self.data_keys: list[bytes] = []

    def wrap(self, data_key: bytes, *, context: Any) -> Wrapped:
        self.data_keys.append(bytes(data_key))
        return super().wrap(data_key, context=context)


def test_same_plaintext_twice_gives_fresh_data_keys_and_ciphertexts() -> None:
    kms = _KeyRecorder(LocalKms(berth.Keyring.generate()))
    sealer = berth.KmsSealer(kms)
    aad = build_aad(b"head", "tenant-a", "k")
    one, two = sealer.seal(b"same plaintext", aad=aad), sealer.seal(b"same plaintext", aad=aad)
    assert len(kms.data_keys) == 2 and kms.data_keys[0] != kms.data_keys[1]
    assert all(len(k) == 32 for k in kms.data_keys)
    (w1, s1), (w2, s2) = _parse(memoryview(one)), _parse(memoryview(two))
    assert w1.ciphertext != w2.ciphertext
    assert one[s1:] != two[s2:], "nonce and ciphertext differ"
    assert sealer.open(one, aad=aad) == sealer.open(two, aad=aad) == b"same plaintext"


def test_sealed_bytes_carry_format_kek_wrapped_key_nonce_ciphertext() -> None:
    keyring = berth.Keyring.generate()
    sealer = berth.KmsSealer(LocalKms(keyring))
    sealed = sealer.seal(SECRET.encode(), aad=b"aad")
    wrapped, start = _parse(memoryview(sealed))
    assert sealed[:2] == b"K\x01"
    assert wrapped.key_id == keyring.primary == sealer.key_id and wrapped.version == ""
    assert len(wrapped.ciphertext) == 60  # LocalKms: nonce + 32-byte key + tag
    assert len(sealed) - start == 12 + len(SECRET) + 16
    assert SECRET.encode() not in sealed


def test_round_trip_with_any_aad_and_wrong_aad_fails() -> None:
    sealer, _ = _sealer()
    sealed = sealer.seal(b"hello", aad=b"not a frame")
    assert sealer.open(sealed, aad=b"not a frame") == b"hello"
    with pytest.raises(berth.IntegrityError):
        sealer.open(sealed, aad=b"not a frame!")


def test_large_body_round_trip() -> None:
    sealer, _ = _sealer()
    body = bytes(range(256)) * (3 << 12)  # 3 MiB
    sealed = sealer.seal(body, aad=b"x")
    assert bytes(sealer.open(sealed, aad=b"x")) == body
    assert sealer.open_parts(sealed, (7, len(body) - 1), aad=b"x") == [body[:7], body[7:-1], body[-1:]]
    changed = bytearray(sealed)
    changed[len(changed) // 2] ^= 1
    with pytest.raises(berth.IntegrityError):
        sealer.open(bytes(changed), aad=b"x")


def test_large_state_through_a_kms_sealed_store() -> None:
    sealer, _ = _sealer()
    store = berth.Store(MemoryBackend(), identity="big", sealer=sealer)
    state = b"[" + b",".join(b"%d" % i for i in range(500_000)) + b"]"
    store.save("k", berth.Envelope(provider_state=state, run_id="r"))
    claimed = store.claim("k")
    assert claimed is not None and type(claimed.provider_state) is bytes and claimed.provider_state == state


def test_wrap_context_is_the_frames_identity_and_key() -> None:
    head = b"\x89BERTH\r\n\x01" + (4).to_bytes(4, "big") + b"{}{}"
    assert wrap_context(build_aad(head, "tenant-a", "ünï/code#1")) == {
        "berth:identity": "tenant-a",
        "berth:key": "ünï/code#1",
    }
    other = wrap_context(b"arbitrary associated data")
    assert list(other) == ["berth:aad-sha256"] and len(other["berth:aad-sha256"]) == 64
    assert wrap_context(build_aad(head, "tenant-a", "k") + b"x") != wrap_context(build_aad(head, "tenant-a", "k"))


def test_store_passes_identity_and_key_to_the_kms() -> None:
    sealer, kms = _sealer()
    store = _store(sealer)
    store.save("org/repo#42", make_envelope())
    assert store.load("org/repo#42") is not None
    assert kms.contexts == [{"berth:identity": "tenant-a", "berth:key": "org/repo#42"}] * 2


# --- one wrap per save, one unwrap per load, none for list, sweep or reseal of current frames -------


def test_kms_calls_per_operation() -> None:
    clock = FakeClock()
    sealer, kms = _sealer()
    store = _store(sealer, clock=clock)
    store.save("k", make_envelope(deadline=clock.now + timedelta(hours=1)))
    assert kms.calls == {"wrap": 1}
    assert store.load("k") is not None
    assert kms.calls == {"wrap": 1, "unwrap": 1}
    kms.calls.clear()
    assert [i.key for i in store.list()] == ["k"]
    assert store.reseal() == 0
    clock.advance(timedelta(hours=2))
    assert store.sweep() == 1
    assert kms.calls == {}
    store.save("k2", make_envelope())
    assert store.claim("k2") is not None
    assert kms.calls == {"wrap": 1, "unwrap": 1}


# --- refusals ------------------------------------------------------------------------------------


def test_wrapped_key_copied_into_another_runs_frame_fails_at_the_kms() -> None:
    sealer, kms = _sealer()
    store = _store(sealer)
    store.save("run/a", make_envelope("a"))
    store.save("run/b", make_envelope("b"))
    _, body_a = _split(_raw(store, "run/a"))
    head_b, body_b = _split(_raw(store, "run/b"))
    wrapped_a, _ = _parse(memoryview(body_a))
    store.backend.put("tenant-a/run/b", head_b + _rebuild(body_b, wrapped_a))
    with pytest.raises(berth.IntegrityError) as info:
        store.load("run/b")
    assert "LocalKms refuses to unwrap" in str(info.value) and SECRET not in str(info.value)
    # and directly at the KMS: the context names the other run
    with pytest.raises(berth.IntegrityError):
        kms.inner.unwrap(wrapped_a, context={"berth:identity": "tenant-a", "berth:key": "run/b"})
    assert len(kms.inner.unwrap(wrapped_a, context={"berth:identity": "tenant-a", "berth:key": "run/a"})) == 32


def test_frame_under_kek_a_is_refused_by_a_sealer_holding_only_kek_b_without_a_kms_call() -> None:
    sealer_a, _ = _sealer()
    sealer_b, kms_b = _sealer()
    backend = MemoryBackend()
    _store(sealer_a, backend).save("k", make_envelope())
    store_b = _store(sealer_b, backend)
    with pytest.raises(berth.IntegrityError) as info:
        store_b.load("k")
    assert sealer_a.key_id in str(info.value)
    assert not sealer_b.can_open("kms", sealer_a.key_id)
    with pytest.raises(berth.IntegrityError):
        sealer_b.open(_split(_raw(store_b, "k"))[1], aad=b"anything")
    assert kms_b.calls == {}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b"garbage" * 10, id="garbage"),
        pytest.param(lambda b: b"\x01" + b[1:], id="aes-gcm-tag"),
        pytest.param(lambda b: b[:1] + b"\x02" + b[2:], id="newer-format"),
        pytest.param(lambda b: b[:40], id="truncated"),
        pytest.param(lambda b: b[:-1], id="short-tag"),
        pytest.param(lambda b: b[:-1] + bytes((b[-1] ^ 1,)), id="changed-tag"),
    ],
)
def test_every_failure_to_open_is_integrity_error(damage: Any) -> None:
    sealer, _ = _sealer()
    sealed = sealer.seal(SECRET.encode(), aad=b"aad")
    with pytest.raises(berth.IntegrityError) as info:
        sealer.open(damage(sealed), aad=b"aad")
    assert SECRET not in str(info.value)


def test_every_byte_of_the_sealed_prefix_is_authenticated() -> None:
    sealer, _ = _sealer()
    sealed = sealer.seal(b"body", aad=b"aad")
    for pos in range(len(sealed)):
        bad = bytearray(sealed)
        bad[pos] ^= 0x01
        with pytest.raises(berth.IntegrityError):
            sealer.open(bytes(bad), aad=b"aad")


def test_wrong_wrapped_key_length_is_integrity_error() -> None:
    sealer, kms = _sealer()
    sealed = sealer.seal(b"body", aad=b"aad")
    wrapped, _ = _parse(memoryview(sealed))
    for blob in (wrapped.ciphertext[:-1], wrapped.ciphertext + b"\x00"):
        with pytest.raises(berth.IntegrityError, match="wrapped data key is"):
            sealer.open(_rebuild(sealed, wrapped._replace(ciphertext=blob)), aad=b"aad")


class _ShortKeyKms(CountingKms):
    def unwrap(self, wrapped: Wrapped, *, context: Any) -> bytes:
        return super().unwrap(wrapped, context=context)[:16]


def test_unwrapped_key_of_the_wrong_length_is_integrity_error() -> None:
    sealer = berth.KmsSealer(_ShortKeyKms(LocalKms(berth.Keyring.generate())))
    with pytest.raises(berth.IntegrityError, match="16 bytes"):
        sealer.open(sealer.seal(b"body", aad=b"aad"), aad=b"aad")


class _DownKms(CountingKms):
    """A KMS client whose service is down: it maps that to BackendError, as every berth client does."""

    def _down(self, context: Any) -> berth.BackendError:
        identity, key = context["berth:identity"], context["berth:key"]
        return berth.BackendError(f"KMS is down at identity {identity!r}, key {key!r}", identity=identity, key=key)

    def wrap(self, data_key: bytes, *, context: Any) -> Wrapped:
        raise self._down(context)

    def unwrap(self, wrapped: Wrapped, *, context: Any) -> bytes:
        raise self._down(context)


def test_kms_down_is_backend_error_and_never_plaintext() -> None:
    keyring = berth.Keyring.generate()
    backend = MemoryBackend()
    good = _store(berth.KmsSealer(LocalKms(keyring)), backend)
    good.save("k", make_envelope("kept"))
    before = _raw(good, "k")
    down = _store(berth.KmsSealer(_DownKms(LocalKms(keyring))), backend)
    with pytest.raises(berth.BackendError) as info:
        down.save("k", make_envelope("new"))
    assert "'k'" in str(info.value)
    with pytest.raises(berth.BackendError):
        down.load("k")
    with pytest.raises(berth.BackendError):
        down.claim("k")
    assert _raw(good, "k") == before
    parked = good.load("k")
    assert parked is not None and parked.envelope.run_id == "kept"


def test_constructor_refuses_what_is_not_a_kms() -> None:
    with pytest.raises(TypeError):
        berth.KmsSealer(berth.Keyring.generate())  # type: ignore[arg-type]


def test_sealer_pickles_and_opens_the_originals_frames() -> None:
    sealer, _ = _sealer()
    sealed = sealer.seal(b"body", aad=b"aad")
    plain = berth.KmsSealer(LocalKms(sealer.kms.inner.keyring))  # type: ignore[attr-defined]
    copy = pickle.loads(pickle.dumps(plain))
    assert copy.key_id == sealer.key_id and copy.open(sealed, aad=b"aad") == b"body"
    assert "KmsSealer(LocalKms(Keyring(" in repr(copy)


def test_rotated_local_keyring_opens_old_frames_and_reseal_moves_them() -> None:
    keyring = berth.Keyring.generate()
    backend = MemoryBackend()
    _store(berth.KmsSealer(LocalKms(keyring)), backend).save("k", make_envelope())
    rotated, kms = _sealer(keyring.rotate())
    store = _store(rotated, backend)
    assert store.load("k") is not None
    assert store.reseal() == 1
    assert next(store.list()).sealed_by == f"kms:{rotated.key_id}"
    new_key = rotated.kms.inner.keyring.key(rotated.key_id)  # type: ignore[attr-defined]
    only_new = berth.Keyring({rotated.key_id: new_key}, rotated.key_id)
    assert _store(berth.KmsSealer(LocalKms(only_new)), backend).load("k") is not None
