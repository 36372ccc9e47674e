"""`AsyncStoreContract`: every case of `StoreContract` again, driven through `berth.aio.AsyncStore`."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest

from berth._aio_store import AsyncStore
from berth._plaintext import PlaintextSealer
from berth._sealer import Sealer
from berth._store import Listing, Parked
from berth.backends import Backend
from berth.backends._aio import AsyncBackend, ThreadedBackend
from berth.testing._contract import StoreContract
from berth.testing._fixtures import FakeClock, make_envelope

__all__ = ["AsyncStoreContract", "AwaitingStore", "Portal"]

T = TypeVar("T")


def _threaded(backend_opener: Callable[[], Backend]) -> AsyncBackend:
    return ThreadedBackend(backend_opener())


def _aclaim_worker(
    opener: Callable[[], AsyncBackend], identity: str, sealer: Sealer, keys: list[str], start: Any, results: Any
) -> None:
    async def race() -> list[str]:
        store = AsyncStore(opener(), identity=identity, sealer=sealer)
        try:
            got = await asyncio.gather(*(store.claim(key) for key in keys))
        finally:
            await store.aclose()
        return [key for key, env in zip(keys, got, strict=True) if env is not None]

    start.wait()
    results.put(asyncio.run(race()))


class Portal:
    """An event loop in a thread: sync callers (the shared cases, their threads) await through it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="berth-contract-loop", daemon=True)
        self._thread.start()

    def call(self, awaitable: Any) -> Any:
        async def wrapped() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class AwaitingStore:
    """A `Store`-shaped face of an `AsyncStore`: every call awaited on a portal's loop.

    It lets the shared cases of `StoreContract` drive the async API unchanged.
    """

    def __init__(self, store: AsyncStore, portal: Portal):
        self.aio = store
        self._portal = portal
        self.identity = store.identity
        self.sealer = store.sealer
        self.core = store.core
        self.backend = store.sync.backend

    def now(self) -> datetime:
        return self.aio.now()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.aio, name)

        def awaited(*args: Any, **kwargs: Any) -> Any:
            return self._portal.call(method(*args, **kwargs))

        return awaited

    def list(self, prefix: str = "", **kwargs: Any) -> Iterator[Listing]:
        # bad arguments raise here, before any I/O, as in Store.list
        return self._pulled(self.aio.list(prefix, **kwargs))

    def load_prefix(self, prefix: str = "", **kwargs: Any) -> Iterator[tuple[str, Parked]]:
        return self._pulled(self.aio.load_prefix(prefix, **kwargs))

    def _pulled(self, rows: AsyncIterator[T]) -> Iterator[T]:
        while True:
            try:
                yield self._portal.call(rows.__anext__())
            except StopAsyncIteration:
                return

    def close(self) -> None:
        self._portal.call(self.aio.aclose())


class AsyncStoreContract(StoreContract):
    """Every case of `StoreContract`, driven through `berth.aio.AsyncStore`.

    Override `backend_opener` as for `StoreContract`; override `async_backend_opener`
    (a picklable zero-argument callable returning an `AsyncBackend` onto the same
    namespace) to race a native async backend -- by default the sync backend runs in
    `ThreadedBackend`. A store made on an explicit sync backend (a recording wrapper)
    runs it in threads.
    """

    # The frame is opened by the same code sync or async: a sample of positions proves the async
    # load refuses what the sync one does, at a seventh of the round trips.
    tamper_stride = 7
    # Each racing process claims all its keys at once (asyncio.gather): two processes of 200
    # concurrent claims race as hard as four sequential ones, for half the interpreter start-ups.
    process_race_workers = 2

    @pytest.fixture
    def async_backend_opener(self, backend_opener: Callable[[], Backend]) -> Callable[[], AsyncBackend]:
        """Override to open a native async backend onto the same namespace."""
        return functools.partial(_threaded, backend_opener)

    @pytest.fixture
    def make_store(
        self, async_backend_opener: Callable[[], AsyncBackend], sealer: Sealer, clock: FakeClock
    ) -> Iterator[Callable[..., AwaitingStore]]:
        portal = Portal()
        opened: list[AwaitingStore] = []

        def make(identity: str = "contract", **kw: Any) -> AwaitingStore:
            kw.setdefault("sealer", sealer)
            kw.setdefault("clock", clock)
            given = kw.pop("backend", None)
            backend = ThreadedBackend(given) if given is not None else async_backend_opener()
            store = AwaitingStore(AsyncStore(backend, identity=identity, **kw), portal)
            opened.append(store)
            return store

        try:
            yield make
        finally:
            for store in opened:
                store.close()
            portal.close()

    def _race_worker(
        self, backend_opener: Callable[[], Backend], request: pytest.FixtureRequest
    ) -> tuple[Callable[[], Any], Callable[..., None]]:
        return request.getfixturevalue("async_backend_opener"), _aclaim_worker

    def test_async_long_header_is_listed_by_a_ranged_read(self, make_store: Callable[..., Any]) -> None:
        # The shared case above runs the async store over a recording sync backend in threads;
        # this one lists through the store's own async backend (native on PostgreSQL and Redis).
        labels = {f"label-{i:02d}": "v" * 40 for i in range(24)}  # a header over 1 KiB
        store = make_store()
        store.save("big", make_envelope(labels=labels, provider_state={"blob": "x" * 200_000}))
        backend = store.aio.backend
        ranged: list[int] = []
        own_head = backend.head

        async def whole_frame(name: str) -> Any:
            raise AssertionError(f"listing a long header read the whole frame of {name!r}")

        async def head(name: str, size: int) -> Any:
            ranged.append(size)
            return await own_head(name, size)

        backend.get, backend.head = whole_frame, head
        try:
            (item,) = store.list()
        finally:
            del backend.get, backend.head
        assert item.error is None and dict(item.labels) == labels and item.size > 200_000
        assert ranged and 1024 < ranged[0] < 4096, "the header alone was read, by its declared length"

    def test_async_sweep_reports_each_removal(self, make_store: Callable[..., Any], clock: FakeClock) -> None:
        store = make_store()
        for i in range(5):
            store.save(f"s/{i}", make_envelope(f"r{i}", deadline=clock.now - timedelta(seconds=1)))
        store.save("live", make_envelope("live", deadline=clock.now + timedelta(hours=1)))
        removed: list[str] = []
        assert store.sweep(on_removed=lambda item: removed.append(item.key)) == 5
        assert sorted(removed) == [f"s/{i}" for i in range(5)]
        assert [item.key for item in store.list()] == ["live"]

    def test_guarantees_are_fixed_at_open(self, make_store: Callable[..., Any]) -> None:
        aio = make_store().aio
        with pytest.raises(AttributeError):
            aio.accept_plaintext = True
        with pytest.raises(AttributeError):
            aio.sealer = PlaintextSealer()
        assert aio.accept_plaintext is False and not isinstance(aio.sealer, PlaintextSealer)
