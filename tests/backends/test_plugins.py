"""A third party's backend, plugged in by URL scheme, passes the conformance suite.

`ShelfBackend` is written here the way a host would write one: it subclasses
`berth.backends.Backend`, implements the four required methods and `from_url`,
and reuses no berth backend code. It is registered by scheme and opened with
`berth.open_store("shelf://...")`, then proven with `berth.testing.StoreContract`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import berth
import berth.backends
from berth.backends import Backend, Data
from berth.testing import AsyncStoreContract, StoreContract, make_envelope


class ShelfBackend(Backend):
    """Frames in a dict, one generation counter per shelf; `shelf://NAME` is shared in this process."""

    _shelves: dict[str, ShelfBackend] = {}
    _shelves_lock = threading.Lock()

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()
        self._gens = itertools.count(1)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> ShelfBackend:
        if options:
            raise berth.BerthError(f"shelf:// takes no options, got {sorted(options)}")
        with cls._shelves_lock:
            return cls._shelves.setdefault(url.partition("://")[2], cls())

    def put(
        self, name: str, data: bytes, *, if_match: berth.Token | None = None, if_absent: bool = False
    ) -> berth.Token:
        with self._lock:
            current = self._data.get(name)
            if if_absent and current is not None:
                raise berth.TokenMismatch(f"{name!r} exists")
            if if_match is not None and (current is None or current[1] != if_match.value):
                raise berth.TokenMismatch(f"{name!r} changed")
            gen = next(self._gens)
            self._data[name] = (bytes(data), gen)
            return berth.Token(gen)

    def get(self, name: str) -> tuple[Data, berth.Token] | None:
        with self._lock:
            found = self._data.get(name)
        return None if found is None else (found[0], berth.Token(found[1]))

    def delete(self, name: str, token: berth.Token) -> None:
        with self._lock:
            found = self._data.get(name)
            if found is None or found[1] != token.value:
                raise berth.TokenMismatch(f"{name!r} is not at {token.value!r}")
            del self._data[name]

    def scan(self, prefix: str) -> Iterator[str]:
        with self._lock:
            names = [name for name in self._data if name.startswith(prefix)]
        yield from names


class NotABackend:
    pass


TARGET = f"{__name__}:ShelfBackend"
berth.backends.register("shelf", TARGET)


def _shelf_url() -> str:
    return f"shelf://contract-{uuid.uuid4().hex}"


class TestShelfContract(StoreContract):
    """Every case of the conformance suite, on a backend berth never heard of, opened by its URL."""

    cross_process = False  # a dict in one process

    @pytest.fixture
    def backend_opener(self) -> Any:
        return functools.partial(berth.backends.open_backend, _shelf_url())


class TestShelfAsyncContract(AsyncStoreContract, TestShelfContract):
    """The same cases through berth.aio: a third-party sync backend runs in worker threads."""


def test_open_store_opens_a_registered_scheme() -> None:
    url = _shelf_url()
    with berth.open_store(url, identity="a", sealer=berth.AesGcmSealer(berth.Keyring.generate())) as store:
        assert type(store.backend) is ShelfBackend
        store.save("k", make_envelope("r1"))
        assert ShelfBackend.from_url(url).get("a/k") is not None, "the frame is on the shelf the URL names"
        assert store.claim("k") is not None and store.claim("k") is None


def test_the_registry_is_read_only_and_lists_the_scheme() -> None:
    assert berth.backends.registry["shelf"].target == TARGET
    with pytest.raises(TypeError):
        berth.backends.registry["other"] = berth.backends.registry["shelf"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("scheme", "target"),
    [("Shelf", TARGET), ("", TARGET), ("sh elf", TARGET), ("shelf2", "no_colon"), ("shelf2", "a:b:c")],
)
def test_register_refuses_a_malformed_scheme_or_target(scheme: str, target: str) -> None:
    with pytest.raises(ValueError):
        berth.backends.register(scheme, target)
    assert "shelf2" not in berth.backends.registry


def test_a_registered_class_that_is_not_a_backend_is_refused() -> None:
    berth.backends.register("notabackend", f"{__name__}:NotABackend")
    with pytest.raises(TypeError, match="does not subclass berth.backends.Backend"):
        berth.open_store("notabackend://x", identity="a", sealer=berth.PlaintextSealer())


def test_an_entry_point_plugs_in_a_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    point = importlib.metadata.EntryPoint(name="shelfep", value=TARGET, group=berth.backends.ENTRY_POINT_GROUP)
    groups: list[str] = []

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        groups.append(group)
        return [point] if group == berth.backends.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(berth.backends, "_entry_points_loaded", False)
    with berth.open_store("shelfep://ep", identity="a", sealer=berth.PlaintextSealer()) as store:
        assert type(store.backend) is ShelfBackend
        store.save("k", make_envelope())
        assert [listing.key for listing in store.list()] == ["k"]
    assert groups == [berth.backends.ENTRY_POINT_GROUP], "entry points are read once, on an unknown scheme"
    with pytest.raises(berth.BerthError, match="unknown store scheme 'nosuch'"):
        berth.open_store("nosuch://x", identity="a", sealer=berth.PlaintextSealer())
    assert groups == [berth.backends.ENTRY_POINT_GROUP]


def test_the_optional_calls_have_defaults_that_hold_the_contract() -> None:
    shelf: Backend = ShelfBackend()
    tokens = [shelf.put(f"i/{n}", f"frame {n}".encode()) for n in "cab"]
    assert [h[0] for h in shelf.sorted_heads("i/", 3, limit=2, reverse=False)] == ["i/a", "i/b"]
    assert sorted((h[0], bytes(h[1]), h[3]) for h in shelf.heads("i/", 3)) == [  # type: ignore[arg-type]
        ("i/a", b"fra", 7),
        ("i/b", b"fra", 7),
        ("i/c", b"fra", 7),
    ]
    assert shelf.head("i/a", 5) == (b"frame", tokens[1])
    assert [None if f is None else bytes(f[0]) for f in shelf.get_many(["i/b", "i/x"])] == [b"frame b", None]
    assert shelf.delete_many([("i/a", tokens[1]), ("i/b", tokens[0])]) == [True, False]
    assert shelf.setup() is None
    shelf.close()
