"""`StoreContract`: the fixtures a backend overrides, over every case of the contract (the case modules)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from berth._aesgcm import AesGcmSealer, Keyring
from berth._sealer import Sealer
from berth._store import Store
from berth.backends import Backend
from berth.testing._fixtures import FakeClock, assert_clean, plant_frame, raw_frame
from berth.testing._lifecycle import LifecycleCases
from berth.testing._listing import ListingCases
from berth.testing._many import SaveManyCases
from berth.testing._refusals import RefusalCases

__all__ = ["StoreContract"]


class StoreContract(LifecycleCases, ListingCases, RefusalCases, SaveManyCases):
    """The store contract of docs/contract.md; subclass and override `backend_opener`."""

    cross_process: ClassVar[bool] = True
    process_race_keys: ClassVar[int] = 200
    process_race_workers: ClassVar[int] = 4
    tamper_stride: ClassVar[int] = 1
    """Every `tamper_stride`-th byte of a frame's first 400 and last 64 is flipped (1: every one)."""

    # --- fixtures a subclass provides or may override ---------------------------------

    @pytest.fixture
    def backend_opener(self) -> Callable[[], Backend]:
        """Override: a picklable zero-arg callable opening a fresh, empty namespace."""
        raise NotImplementedError("override the backend_opener fixture to run StoreContract")

    @pytest.fixture
    def sealer(self) -> Sealer:
        """The sealer the contract runs under (AES-256-GCM by default)."""
        return AesGcmSealer(Keyring.generate())

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def make_store(
        self, backend_opener: Callable[[], Backend], sealer: Sealer, clock: FakeClock
    ) -> Iterator[Callable[..., Store]]:
        opened: list[Store] = []

        def make(identity: str = "contract", **kw: Any) -> Store:
            kw.setdefault("sealer", sealer)
            kw.setdefault("clock", clock)
            backend = kw.pop("backend", None) or backend_opener()
            store = Store(backend, identity=identity, **kw)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()

    @pytest.fixture
    def store(self, make_store: Callable[..., Store]) -> Store:
        return make_store()

    # --- helpers for a subclass's own cases (the shipped cases call berth.testing's functions) ---

    _raw = staticmethod(raw_frame)
    _plant = staticmethod(plant_frame)
    _assert_clean = staticmethod(assert_clean)
