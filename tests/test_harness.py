"""The suite's own helpers (tests/conftest.py) do what the tests that use them rely on."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.conftest import collecting_its_garbage


class _Cycle:
    """Garbage only the cycle collector can free: it refers to itself; `freed` records its end."""

    def __init__(self, name: str, freed: list[str]):
        self.name, self.freed, self.me = name, freed, self

    def __del__(self) -> None:
        self.freed.append(self.name)


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    yield
    if was:
        gc.enable()


@pytest.mark.usefixtures("no_automatic_collection")
def test_collecting_its_garbage_frees_what_the_body_left_and_only_that() -> None:
    freed: list[str] = []
    _Cycle("before", freed)  # garbage already when the body starts: not the body's to answer for
    with collecting_its_garbage():
        _Cycle("inside", freed)
        assert freed == []
    assert freed == ["inside"], "the body's cyclic garbage is collected as the body ends"
    gc.collect()
    assert freed == ["inside", "before"], "what was frozen out goes back to the collector"


@pytest.mark.usefixtures("no_automatic_collection")
def test_collecting_its_garbage_hands_everything_back_when_the_body_raises() -> None:
    freed: list[str] = []
    with pytest.raises(RuntimeError), collecting_its_garbage():
        _Cycle("inside", freed)
        raise RuntimeError("the body failed")
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert freed == ["inside"]
