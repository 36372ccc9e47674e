"""AesGcmSealer and Keyring."""

from __future__ import annotations

import os
import pickle
import stat

import pytest

import berth
from berth._plan import in_pieces


def test_keyring_save_is_0600_and_round_trips(tmp_path) -> None:
    ring = berth.Keyring.generate()
    old = os.umask(0)
    try:
        ring.save(tmp_path / "keys.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "keys.json").st_mode) == 0o600
    loaded = berth.Keyring.load(tmp_path / "keys.json")
    assert loaded.primary == ring.primary and loaded.key(ring.primary) == ring.key(ring.primary)


def test_rotate_seals_with_the_new_key_and_opens_old_frames() -> None:
    old = berth.Keyring.generate()
    new = old.rotate()
    assert new.primary != old.primary and old.primary in new and len(new) == 2
    sealed_old = berth.AesGcmSealer(old).seal(b"state", aad=b"a")
    sealer = berth.AesGcmSealer(new)
    assert sealer.open(sealed_old, aad=b"a") == b"state"
    assert sealer.key_id == new.primary
    with pytest.raises(berth.IntegrityError):
        berth.AesGcmSealer(berth.Keyring.generate()).open(sealed_old, aad=b"a")


def test_every_failure_to_open_is_integrity_error() -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    sealed = sealer.seal(b"state", aad=b"a")
    for bad in (b"", b"\x01", b"\x02" + sealed[1:], sealed[:-1], sealed + b"x", b"\x01\xff" + b"k" * 40):
        with pytest.raises(berth.IntegrityError):
            sealer.open(bad, aad=b"a")
    with pytest.raises(berth.IntegrityError):
        sealer.open(sealed, aad=b"b")


def test_bad_keyrings_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError):
        berth.Keyring({"k": b"short"}, "k")
    with pytest.raises(ValueError):
        berth.Keyring({"k": bytes(32)}, "other")
    (tmp_path / "bad.json").write_text("{}")
    (tmp_path / "bad.json").chmod(0o600)
    with pytest.raises(ValueError):
        berth.Keyring.load(tmp_path / "bad.json")
    with pytest.raises(TypeError):
        berth.AesGcmSealer(b"0" * 32)  # type: ignore[arg-type]


def test_repr_never_shows_key_material() -> None:
    ring = berth.Keyring.generate()
    key = ring.key(ring.primary)
    assert key is not None
    for text in (repr(ring), repr(berth.AesGcmSealer(ring))):
        assert key.hex() not in text and str(key) not in text


def test_sealer_pickles_for_worker_processes() -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    clone = pickle.loads(pickle.dumps(sealer))
    assert clone.open(sealer.seal(b"x", aad=b"a"), aad=b"a") == b"x"


def test_large_bodies_round_trip() -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    data = os.urandom(3 << 20)
    assert bytes(sealer.open(sealer.seal(data, aad=b"a"), aad=b"a")) == data


def test_small_bodies_are_sealed_into_the_frame_the_one_shot_way() -> None:
    # Encrypted in place after the head (no second copy of the body): the same bytes as
    # joining the head to a one-shot AES-GCM of the joined parts, and `seal` still gives bytes.
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from berth._aesgcm import gcm_seal_parts

    key, nonce = bytes(range(32)), bytes(12)
    parts = (b'{"v":1,"provider_state":', os.urandom(64 << 10), b"}")
    sealed = gcm_seal_parts(key, AESGCM(key), nonce, b"FRAME-HEAD", parts, b"aad")
    assert bytes(sealed) == b"FRAME-HEAD" + AESGCM(key).encrypt(nonce, b"".join(parts), b"aad")
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    one = sealer.seal(b"[1,2]", aad=b"a")
    assert type(one) is bytes and sealer.open(one, aad=b"a") == b"[1,2]"


# --- large bodies: sealed and opened piece by piece -------------------------------------

BIG = 3 * (1 << 20) + 5  # above the 1 MiB streaming threshold, not a multiple of the AES block


def test_large_bodies_stream_to_the_same_bytes_one_shot_aes_gcm_reads() -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from berth._aesgcm import gcm_open_split, gcm_seal_parts

    key, nonce = bytes(range(32)), bytes(12)
    parts = (b"head-of-body:", os.urandom(BIG), b"}")
    joined = b"".join(parts)
    sealed = gcm_seal_parts(key, AESGCM(key), nonce, b"FRAME", parts, b"aad")
    assert isinstance(sealed, bytearray) and sealed[:5] == b"FRAME"
    assert bytes(sealed[5:]) == AESGCM(key).encrypt(nonce, joined, b"aad")  # same GCM, streamed
    cuts = (len(parts[0]), len(parts[0]) + BIG)
    pieces = gcm_open_split(key, AESGCM(key), nonce, memoryview(sealed)[5:], b"aad", cuts)
    assert pieces == list(parts) and all(type(p) is bytes for p in pieces)


def test_large_bodies_hold_the_gil_a_mib_at_a_time(monkeypatch) -> None:
    # issue 35 (loop stalls): berth.aio seals and opens large frames in a worker thread, but one
    # cryptography call or one allocation of the whole frame holds the GIL, so the event loop too,
    # for all of it (~20 ms each at 48 MiB). Asserted: no call of the cipher is given more than a
    # MiB, and the frame is grown, never allocated whole (which zeroes it in one call).
    from cryptography.hazmat.primitives import ciphers
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from berth import _aesgcm
    from berth._sealer import LARGE_FRAME, FrameBuffer

    fed: list[int] = []
    real = ciphers.Cipher

    class Context:  # an encryptor or decryptor, recording the size of every piece it is given
        def __init__(self, ctx):
            self.ctx = ctx

        def update(self, data):
            fed.append(len(data))
            return self.ctx.update(data)

        def update_into(self, data, buf):
            fed.append(len(data))
            return self.ctx.update_into(data, buf)

        def __getattr__(self, name):
            return getattr(self.ctx, name)

    class SpyCipher:
        def __init__(self, *args):
            self.cipher = real(*args)

        def encryptor(self):
            return Context(self.cipher.encryptor())

        def decryptor(self):
            return Context(self.cipher.decryptor())

    sized: list[int] = []

    class SpyBuffer(FrameBuffer):
        def __init__(self, arg=b""):
            if isinstance(arg, int):
                sized.append(arg)
            super().__init__(arg)

    monkeypatch.setattr(ciphers, "Cipher", SpyCipher)
    monkeypatch.setattr(_aesgcm, "FrameBuffer", SpyBuffer)
    key, nonce = bytes(range(32)), bytes(12)
    parts = (b"head:", os.urandom(BIG), b"}")
    cuts = (len(parts[0]), len(parts[0]) + BIG)
    seal = _aesgcm.gcm_seal_parts
    sealed = in_pieces(seal, key, AESGCM(key), nonce, b"FRAME", parts, b"aad")
    assert fed and max(fed) <= LARGE_FRAME and sum(fed) == sum(map(len, parts))
    assert sized == [] and isinstance(sealed, FrameBuffer)
    fed.clear()
    pieces = in_pieces(_aesgcm.gcm_open_split, key, AESGCM(key), nonce, memoryview(sealed)[5:], b"aad", cuts)
    assert pieces == list(parts) and all(type(p) is bytes for p in pieces)
    assert len(fed) >= 4 and max(fed) <= LARGE_FRAME and sum(fed) == sum(map(len, parts))
    # Outside `in_pieces` (the sync API): one buffer of the frame's size, each piece opened in one
    # call into bytes of its exact size (no second pass: the 16 MiB seal + open at AESGCM's speed).
    fed.clear()
    whole = seal(key, AESGCM(key), nonce, b"FRAME", parts, b"aad")
    assert sized == [5 + sum(map(len, parts)) + 16] and bytes(whole) == bytes(sealed)
    assert max(fed) <= LARGE_FRAME  # still encrypted a MiB per call into that buffer
    fed.clear()
    assert _aesgcm.gcm_open_split(key, AESGCM(key), nonce, memoryview(whole)[5:], b"aad", cuts) == list(parts)
    assert fed == [len(p) for p in parts]


def test_in_pieces_is_set_only_inside_it_and_by_berth_aio_for_large_work(monkeypatch) -> None:
    import asyncio

    import berth.aio
    from berth import _aesgcm
    from berth._plan import InThreads, piecewise

    assert not piecewise() and in_pieces(piecewise) and not piecewise()  # the caller's context is untouched
    seen: list[bool] = []
    real = _aesgcm.gcm_seal_parts

    def spy(*args):
        seen.append(piecewise())
        return real(*args)

    monkeypatch.setattr(_aesgcm, "gcm_seal_parts", spy)
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    state = b'"' + b"x" * BIG + b'"'
    berth.open_store("memory://", identity="big", sealer=sealer).save("k", berth.Envelope(provider_state=state))

    async def park() -> None:
        store = berth.aio.open_store("memory://", identity="big", sealer=sealer)
        await store.save("k", berth.Envelope(provider_state=state))
        await store.save("small", berth.Envelope(provider_state=b"{}"))

    asyncio.run(park())
    assert seen == [False, True, False]  # sync; berth.aio's large save in its worker thread; small, on the loop

    class Probe:  # a sync object's methods awaited (async wakes over sync stores): in pieces too
        def seen(self) -> bool:
            return piecewise()

    async def seen_in_a_thread() -> bool:
        return bool(await InThreads(Probe()).seen())

    assert asyncio.run(seen_in_a_thread()) is True and not piecewise()


@pytest.mark.parametrize("where", [0, BIG // 2, BIG + 20, -1])
def test_a_changed_byte_in_a_large_body_fails_to_open(where: int) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    sealed = bytearray(sealer.seal(os.urandom(BIG), aad=b"a"))
    sealed[where] ^= 1
    with pytest.raises(berth.IntegrityError):
        sealer.open_parts(memoryview(sealed), (10, BIG - 10), aad=b"a")


def test_large_state_round_trips_through_a_store_as_bytes() -> None:
    store = berth.open_store("memory://", identity="big", sealer=berth.AesGcmSealer(berth.Keyring.generate()))
    state = b"[" + b",".join(b'"%d"' % i for i in range(400_000)) + b"]"
    assert len(state) > 1 << 20
    store.save("k", berth.Envelope(provider_state=state, run_id="r"))
    parked = store.load("k")
    assert parked is not None
    assert type(parked.envelope.provider_state) is bytes and parked.envelope.provider_state == state
    claimed = store.claim("k")
    assert claimed is not None and claimed.provider_state == state and store.load("k") is None


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o640, 0o604, 0o620])
def test_a_keyring_others_can_read_or_write_is_refused(tmp_path, mode: int) -> None:
    path = tmp_path / "keys.json"
    berth.Keyring.generate().save(path)
    os.chmod(path, mode)
    with pytest.raises(PermissionError) as info:
        berth.Keyring.load(path)
    message = str(info.value)
    assert f"chmod 600 {path}" in message and f"{mode:04o}" in message and "\n" not in message
    assert berth.Keyring.load(path, allow_readable=True).primary  # the explicit opt-out
    os.chmod(path, 0o600)
    assert berth.Keyring.load(path).primary
    os.chmod(path, 0o400)
    assert berth.Keyring.load(path).primary
