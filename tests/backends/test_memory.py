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
