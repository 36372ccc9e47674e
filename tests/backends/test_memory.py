from __future__ import annotations

import functools
import uuid

import pytest

from berth.backends.memory import MemoryBackend
from berth.testing import AsyncStoreContract, StoreContract


class TestMemoryContract(StoreContract):
    cross_process = False

    @pytest.fixture
    def backend_opener(self, request: pytest.FixtureRequest):
        name = f"contract-{uuid.uuid4().hex}"
        return functools.partial(MemoryBackend.from_url, f"memory://{name}")


class TestMemoryAsyncContract(AsyncStoreContract, TestMemoryContract):
    """The same cases through berth.aio (this backend in worker threads)."""


def test_plain_memory_url_is_private() -> None:
    a, b = MemoryBackend.from_url("memory://"), MemoryBackend.from_url("memory://")
    a.put("x/k", b"1")
    assert b.get("x/k") is None


def test_generations_count_up_bucket_wide() -> None:
    m = MemoryBackend()
    assert [m.put(n, b"").value for n in ("a", "b", "a")] == [1, 2, 3]


def test_a_sealed_frame_is_kept_without_a_copy_and_read_back_read_only() -> None:
    # issue 15 (sealing 16 MiB): copying a 16 MiB frame to bytes on every put cost about a third
    # of the seal; a FrameBuffer (what a sealer hands over) is kept as it is.
    import os

    import berth
    from berth._sealer import LARGE_FRAME, FrameBuffer

    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    store = berth.open_store("memory://", identity="big", sealer=sealer)
    state = b'"' + os.urandom(LARGE_FRAME).hex().encode() + b'"'
    sealed = sealer.seal_parts(b"", (state,), aad=b"a")
    assert type(sealed) is FrameBuffer
    m = MemoryBackend()
    m.put("x/k", sealed)
    found = m.get("x/k")
    assert found is not None
    view = found[0]
    assert isinstance(view, memoryview) and view.readonly and view.obj is sealed  # no copy
    with pytest.raises(TypeError):
        view[0] = 0
    store.save("k", berth.Envelope(provider_state=state))
    parked = store.load("k")
    assert parked is not None and parked.envelope.provider_state == state


def test_any_other_buffer_is_copied_on_put() -> None:
    m = MemoryBackend()
    for kind in (bytearray, lambda b: memoryview(bytearray(b))):
        data = kind(b"x" * (2 << 20))
        m.put("x/k", data)
        data[0] = ord("y")
        found = m.get("x/k")
        assert found is not None and type(found[0]) is bytes and found[0][:1] == b"x"
