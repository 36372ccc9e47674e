"""`save_many` beyond the shipped contract (src/berth/testing/_many.py): batches past the store's chunk on
the backends that write a chunk at once, a chunk that fails whole, large frames in a batch, a witness."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import berth
import berth.aio
import berth.backends.memory
from berth.backends import Backend, Put, as_backend
from berth.testing import make_envelope

SEALER = berth.AesGcmSealer(berth.Keyring.generate())


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind = request.param
    if kind == "memory":
        yield f"memory://many-{uuid.uuid4().hex}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/many.db"
    elif kind == "postgresql":
        dsn = request.getfixturevalue("postgres_dsn")
        schema = f"berth_m_{uuid.uuid4().hex[:12]}"
        yield f"{dsn}?schema={schema}"
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        # check_durability=false: this server runs without persistence on purpose (tests/backends/test_redis.py)
        yield f"{request.getfixturevalue('redis_url')}?prefix=many{uuid.uuid4().hex[:12]}&check_durability=false"


def _batch(count: int, parked: str) -> list[berth.SaveItem]:
    return [
        berth.SaveItem(f"bulk/{i:05d}", make_envelope(f"r{i}"), if_absent=f"bulk/{i:05d}" == parked)
        for i in range(count)
    ]


def _check(store: berth.Store, results: list[berth.SaveResult], count: int, parked: str) -> None:
    assert [r.key for r in results] == [f"bulk/{i:05d}" for i in range(count)]
    lost = [r for r in results if not r.ok]
    assert [r.key for r in lost] == [parked] and isinstance(lost[0].error, berth.TokenMismatch)
    assert len({r.token for r in results if r.ok}) == count - 1
    assert sum(1 for _ in store.list("bulk/")) == count
    found = store.load_many([f"bulk/{i:05d}" for i in (0, 499, 500, 700, count - 1)])
    assert [p.envelope.run_id for p in found if p is not None] == ["r0", "r499", "r500", "before", f"r{count - 1}"]


def test_a_batch_past_the_store_chunk_keeps_each_outcome(url: str) -> None:
    count, parked = 1001, "bulk/00700"  # three chunks of the default 500
    with berth.open_store(url, identity="many", sealer=SEALER) as store:
        assert store.core.save_batch == 500
        store.save(parked, make_envelope("before"))
        _check(store, store.save_many(_batch(count, parked)), count, parked)


def test_a_batch_past_the_store_chunk_keeps_each_outcome_awaited(url: str) -> None:
    count, parked = 1001, "bulk/00700"

    async def main() -> list[berth.SaveResult]:
        async with berth.aio.open_store(url, identity="many", sealer=SEALER) as store:
            await store.save(parked, make_envelope("before"))
            return await store.save_many(_batch(count, parked))

    results = asyncio.run(main())
    with berth.open_store(url, identity="many", sealer=SEALER) as store:
        _check(store, results, count, parked)


def test_large_frames_in_a_batch(url: str) -> None:
    # Over 1 MiB a frame is written by its backend's large-frame path (SQLite's blob I/O in the
    # batch's transaction; PostgreSQL's COPY, alone): each round trips with the small ones around it.
    big = {"blob": "x" * (1400 * 1024)}
    with berth.open_store(url, identity="many", sealer=SEALER) as store:
        old = store.save("big-2", make_envelope("old"))
        results = store.save_many(
            [
                ("small-1", make_envelope("s1")),
                ("big-1", make_envelope("b1", provider_state=big)),
                berth.SaveItem("big-2", make_envelope("b2", provider_state=big), if_match=old),
                berth.SaveItem("small-1x", make_envelope("s2"), if_match=old),  # nothing there: lost
            ]
        )
        assert [r.ok for r in results] == [True, True, True, False]
        found = store.load_many(["small-1", "big-1", "big-2", "small-1x"])
        assert [p and p.envelope.run_id for p in found] == ["s1", "b1", "b2", None]
        assert (
            found[1] is not None
            and found[1].envelope.provider_state == make_envelope(provider_state=big).provider_state
        )
        assert found[2] is not None and found[2].token == results[2].token


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_chunk_that_fails_writes_none_of_its_items(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # A trigger refuses one name: the chunk's transaction rolls back whole, and says which chunk.
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/many.db"
        berth.open_store(url, identity="many", sealer=SEALER).close()
        with sqlite3.connect(tmp_path / "many.db") as conn:
            conn.execute(
                "CREATE TRIGGER boom BEFORE INSERT ON berth_frames WHEN NEW.name LIKE '%boom' "
                "BEGIN SELECT RAISE(ABORT, 'boom'); END"
            )
        cleanup: Callable[[], Any] = lambda: None  # noqa: E731
    else:
        import psycopg

        dsn = request.getfixturevalue("postgres_dsn")
        schema = f"berth_m_{uuid.uuid4().hex[:12]}"
        url = f"{dsn}?schema={schema}"
        with berth.open_store(url, identity="many", sealer=SEALER) as store:
            store.setup()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                f'CREATE FUNCTION "{schema}".boom() RETURNS trigger AS $$ BEGIN '
                "IF NEW.name LIKE '%boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            admin.execute(
                f'CREATE TRIGGER boom BEFORE INSERT ON "{schema}".frames '
                f'FOR EACH ROW EXECUTE FUNCTION "{schema}".boom()'
            )

        def cleanup() -> None:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    try:
        with berth.open_store(url, identity="many", sealer=SEALER) as store:
            store.core.save_batch = 3
            keys = ["a", "b", "c", "d", "e-boom", "f", "g"]  # chunks: a b c | d e-boom f | g
            with pytest.raises(berth.BackendError) as info:
                store.save_many([(key, make_envelope(key)) for key in keys])
            assert info.value.identity == "many" and info.value.key == "d (+2 more)"
            assert [p is not None for p in store.load_many(keys)] == [True, True, True, False, False, False, False]
    finally:
        cleanup()


class _FourMethods:
    """A backend of a host's own that is no `Backend` subclass: its put_many is the base class's loop."""

    def __init__(self) -> None:
        self.inner = berth.backends.memory.MemoryBackend.from_url(f"memory://four-{uuid.uuid4().hex}")
        self.puts = 0

    def put(self, name: str, data: bytes, **condition: Any) -> berth.Token:
        self.puts += 1
        return self.inner.put(name, data, **condition)

    def get(self, name: str) -> Any:
        return self.inner.get(name)

    def delete(self, name: str, token: berth.Token) -> None:
        self.inner.delete(name, token)

    def scan(self, prefix: str) -> Iterator[str]:
        return self.inner.scan(prefix)


def test_a_backend_without_put_many_saves_one_by_one() -> None:
    backend = _FourMethods()
    store = berth.Store(as_backend(backend), identity="four", sealer=SEALER)
    first = store.save("a", make_envelope("a"))
    results = store.save_many([("b", make_envelope("b")), berth.SaveItem("a", make_envelope("a2"), if_absent=True)])
    assert [r.ok for r in results] == [True, False] and backend.puts == 3
    parked = store.load("a")
    assert parked is not None and parked.envelope.run_id == "a" and parked.token == first


def test_backend_put_many_is_on_the_base_class() -> None:
    # Every backend has it (the default loops over `put`); the built-in batching ones override it.
    from berth.backends.postgres import PostgresBackend
    from berth.backends.redis import RedisBackend
    from berth.backends.sqlite import SqliteBackend

    for cls in (SqliteBackend, PostgresBackend, RedisBackend):
        assert cls.put_many is not Backend.put_many, cls
    assert berth.backends.memory.MemoryBackend.put_many is Backend.put_many
    assert Put("n", b"d") == ("n", b"d", None, False)


def test_a_witnessed_batch_is_witnessed_item_by_item(tmp_path: Path) -> None:
    witness = f"sqlite:///{tmp_path}/witness.db"
    with berth.open_store(f"sqlite:///{tmp_path}/frames.db", identity="w", sealer=SEALER, witness=witness) as store:
        store.save("taken", make_envelope("first"))
        results = store.save_many(
            [(f"k/{i}", make_envelope(f"k{i}")) for i in range(5)]
            + [berth.SaveItem("taken", make_envelope("second"), if_absent=True)]
        )
        assert [r.ok for r in results] == [True] * 5 + [False]
        report = store.audit()
        assert report.ok and report.checked == 6
        parked = store.load("k/3")
        assert parked is not None and parked.token == results[3].token
        assert store.claim("k/3") is not None and store.load("k/3") is None
