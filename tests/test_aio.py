"""berth.aio beyond the store contract (which tests/backends runs through AsyncStoreContract):
the async question store and coordinator, sealing off the loop, bounded threads, native backends."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import berth
import berth.aio
from berth._store import StoreCore
from berth.backends._aio import ThreadedBackend
from berth.backends.memory import MemoryBackend
from berth.testing import FakeClock, make_envelope
from tests.conftest import require

KEY = "org/repo#42"


def _sealer() -> berth.Sealer:
    return berth.AesGcmSealer(berth.Keyring.generate())


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("redis", marks=pytest.mark.redis)])  # fmt: skip
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    kind = request.param
    if kind == "memory":
        yield f"memory://aio-{uuid.uuid4().hex}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/berth.db"
    elif kind == "postgresql":
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = f"berth_aio_{uuid.uuid4().hex[:12]}"
        yield f"{dsn}?schema={schema}"
        psycopg = require("psycopg", "PostgreSQL")
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix = f"berth-aio-{uuid.uuid4().hex[:12]}:"
        yield f"{redis_url}?prefix={prefix}&check_durability=false"
        redis = require("redis", "Redis")
        admin = redis.Redis.from_url(redis_url)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


@pytest.fixture
def pg_schema(postgres_dsn: str) -> Iterator[str]:
    """A schema name of this test's own on the test server, dropped (with all in it) afterwards."""
    psycopg = require("psycopg", "PostgreSQL")
    schema = f"berth_aio_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_open_store_is_native_where_the_client_is_async(url: str) -> None:
    async def main() -> str:
        async with berth.aio.open_store(url, identity="aio", sealer=_sealer()) as store:
            token = await store.save("k", make_envelope())
            parked = await store.load("k")
            assert parked is not None and parked.token == token
            return type(store.backend).__name__

    kind = asyncio.run(main())
    expected = {"postgresql": "AsyncPostgresBackend", "redis": "AsyncRedisBackend"}.get(url.split(":")[0])
    assert kind == (expected or "ThreadedBackend")


def test_suspend_and_wake_awaited(url: str) -> None:
    clock = FakeClock()

    async def main() -> None:
        sealer = _sealer()
        store = berth.aio.open_store(url, identity="aio", sealer=sealer, clock=clock)
        questions = berth.aio.open_questions(url, identity="aio", sealer=sealer, clock=clock)
        coordinator = berth.aio.Coordinator(store, questions)
        assert (await coordinator.wake(KEY)).decision is berth.WakeDecision.FRESH
        parked = await coordinator.suspend(KEY, make_envelope(), "Ship it?")
        assert parked.deadline == clock.now + timedelta(days=14)
        assert (await coordinator.wake(KEY)).decision is berth.WakeDecision.REARM
        question = await questions.pending(KEY)
        assert question is not None and question.prompt == "Ship it?"
        assert [q.id async for q, _ in questions.list()] == [question.id]
        assert [h.key async for h in questions.headers()] == [KEY]
        await questions.provide(KEY, question.id, "yes", by="alice")
        # many wakers at once on one loop: exactly one resumes
        wakes = await asyncio.gather(*(coordinator.wake(KEY) for _ in range(8)))
        decisions = sorted(w.decision.value for w in wakes)
        assert decisions.count("resume") == 1, decisions
        won = next(w for w in wakes if w.decision is berth.WakeDecision.RESUME)
        assert won.answer is not None and won.answer.text == "yes" and won.envelope is not None
        assert (await coordinator.wake(KEY)).decision is berth.WakeDecision.FRESH
        assert await questions.pending(KEY) is None
        await questions.aclose()
        await store.aclose()

    asyncio.run(main())


def test_sync_and_async_coordinators_share_one_protocol(tmp_path: Any) -> None:
    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    sync = berth.Coordinator(
        berth.open_store(url, identity="mix", sealer=sealer), berth.open_questions(url, identity="mix", sealer=sealer)
    )
    sync.suspend(KEY, make_envelope(), "Ship it?")

    async def main() -> berth.Wake:
        store = berth.aio.open_store(url, identity="mix", sealer=sealer)
        questions = berth.aio.open_questions(url, identity="mix", sealer=sealer)
        question = await questions.pending(KEY)
        assert question is not None
        with pytest.raises(berth.AnswerRefused) as refused:
            await questions.provide(KEY, "not-the-question", "no")
        with pytest.raises(berth.AnswerRefused) as refused_sync:
            sync.questions.provide(KEY, "not-the-question", "no")  # type: ignore[attr-defined]
        assert str(refused.value) == str(refused_sync.value), "the same message, sync or async"
        await questions.provide(KEY, question.id, "ship", by="bob")
        wake = await berth.aio.Coordinator(store, questions).wake(KEY)
        await store.aclose()
        await questions.aclose()
        return wake

    wake = asyncio.run(main())
    assert wake.decision is berth.WakeDecision.RESUME and wake.answer is not None and wake.answer.by == "bob"
    assert sync.wake(KEY).decision is berth.WakeDecision.FRESH


def test_errors_and_messages_are_the_sync_ones() -> None:
    backend = MemoryBackend()
    sealer = _sealer()
    sync = berth.Store(backend, identity="same", sealer=sealer)

    async def main() -> None:
        store = berth.aio.AsyncStore(ThreadedBackend(backend), identity="same", sealer=sealer)
        token = await store.save("k", make_envelope())
        await store.save("k", make_envelope("two"))
        for method, args, kwargs in (
            ("delete", ("k", token), {}),
            ("save", ("k", make_envelope()), {"if_absent": True}),
            ("load", ("../x",), {}),
            ("delete", ("k", berth.Token.ZERO), {}),
        ):
            with pytest.raises(berth.BerthError) as a:
                getattr(sync, method)(*args, **kwargs)
            with pytest.raises(berth.BerthError) as b:
                await getattr(store, method)(*args, **kwargs)
            assert type(a.value) is type(b.value) and str(a.value) == str(b.value)
        with pytest.raises(berth.InvalidKey):
            store.list("/abs")  # raised at the call, before any I/O, as the sync list does
        with pytest.raises(ValueError):
            store.list(limit=0)
        await store.aclose()

    asyncio.run(main())


def test_large_states_are_sealed_and_opened_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    where: dict[str, list[bool]] = {"build": [], "open": []}
    core_cls = StoreCore
    real_build, real_open = core_cls.build, core_cls.opened

    def build(self: StoreCore, *args: Any) -> Any:
        where["build"].append(threading.current_thread() is threading.main_thread())
        return real_build(self, *args)

    def opened(self: StoreCore, *args: Any) -> Any:
        where["open"].append(threading.current_thread() is threading.main_thread())
        return real_open(self, *args)

    monkeypatch.setattr(core_cls, "build", build)
    monkeypatch.setattr(core_cls, "opened", opened)
    big = {"blob": "x" * (berth.aio.OFF_LOOP_BYTES + 1)}

    async def main() -> None:
        store = berth.aio.open_store("memory://", identity="big", sealer=_sealer())
        await store.save("small", make_envelope())
        await store.save("big", make_envelope(provider_state=big))
        assert (await store.load("small")) is not None
        parked = await store.load("big")
        assert parked is not None and parked.envelope.state() == big
        await store.aclose()

    asyncio.run(main())  # the loop runs in the main thread
    assert where == {"build": [True, False], "open": [True, False]}, "small on the loop, large off it"


def test_an_enumeration_lets_other_tasks_run_between_pages_of_rows() -> None:
    # A native backend hands over a page of rows with no await between them (PostgreSQL 256, Redis
    # 128 per script call): the store must still let the loop run other tasks every 64 rows.
    inner = ThreadedBackend(MemoryBackend())

    class OnePage(berth.aio.AsyncBackend):
        put, get, delete, delete_many = inner.put, inner.get, inner.delete, inner.delete_many
        rows: list[Any] = []  # read before the enumeration: it yields them all, never suspending

        def heads(self, prefix: str, size: int) -> Any:
            return self.sorted_heads(prefix, size, limit=None, reverse=False)

        async def sorted_heads(self, prefix: str, size: int, *, limit: Any, reverse: bool) -> Any:
            for row in self.rows:
                yield row

    async def ticks_during(work: Any) -> int:
        state = {"ticks": 0, "done": False}

        async def ticker() -> None:
            while not state["done"]:
                state["ticks"] += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        state["ticks"] = 0
        await work
        state["done"] = True
        await task
        return state["ticks"]

    async def main() -> None:
        backend = OnePage()
        store = berth.aio.AsyncStore(backend, identity="page", sealer=_sealer())
        await asyncio.gather(*(store.save(f"k/{i:03d}", make_envelope()) for i in range(640)))
        for work in (functools.partial(_drain, store), store.delete_prefix):
            backend.rows = [row async for row in inner.heads("page/k/", 1024)]
            ticks = await ticks_during(work("k/"))
            assert ticks >= 640 // 64 - 1, f"the loop ran other tasks only {ticks} times in 640 rows"
        backend.rows = []
        assert [row async for row in inner.heads("page/", 1024)] == []
        await inner.aclose()

    asyncio.run(main())


async def _drain(store: berth.aio.AsyncStore, prefix: str) -> int:
    return len([row async for row in store.list(prefix)])


def test_threaded_backends_hold_at_most_max_threads_calls() -> None:
    inner = MemoryBackend()
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()
    real_get = inner.get

    def slow_get(name: str) -> Any:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.01)
        with lock:
            state["now"] -= 1
        return real_get(name)

    inner.get = slow_get  # type: ignore[method-assign]

    async def main() -> None:
        store = berth.aio.AsyncStore(ThreadedBackend(inner, max_threads=3), identity="t", sealer=_sealer())
        await store.save("k", make_envelope())
        assert all(p is not None for p in await asyncio.gather(*(store.load("k") for _ in range(30))))
        await store.aclose()

    asyncio.run(main())
    assert state["peak"] == 3
    with pytest.raises(ValueError):
        ThreadedBackend(inner, max_threads=0)


@pytest.mark.redis
def test_redis_waits_for_a_connection_instead_of_failing(redis_url: str) -> None:
    prefix = f"berth-aio-{uuid.uuid4().hex[:12]}:"

    async def main() -> None:
        store = berth.aio.open_store(
            redis_url, identity="many", sealer=_sealer(), prefix=prefix, check_durability=False, max_connections=4
        )
        await store.save("k", make_envelope())
        found = await asyncio.gather(*(store.load("k") for _ in range(300)))  # redis.asyncio's own pool would raise
        assert all(p is not None for p in found)
        assert await store.delete_prefix("") == 1
        await store.aclose()

    asyncio.run(main())


@pytest.mark.redis
def test_redis_async_pool_bounds_waits_replaces_killed_connections_and_forks(redis_url: str) -> None:
    import multiprocessing

    redis = require("redis", "Redis")
    prefix = f"berth-aio-{uuid.uuid4().hex[:12]}:"
    name = f"berth-aio-{uuid.uuid4().hex[:8]}"
    backend: Any = berth.aio.open_backend(
        redis_url, prefix=prefix, check_durability=False, max_connections=2, pool_timeout=0.3, client_name=name
    )
    pool = backend.client.connection_pool
    admin = redis.Redis.from_url(redis_url)

    async def client_id() -> int:
        conn = await pool.take()
        try:
            await conn.send_command("CLIENT", "ID")
            return int(await conn.read_response())
        finally:
            pool.give(conn)

    async def parent() -> None:
        token = await backend.put("k", b"v")
        await asyncio.gather(*(backend.get("k") for _ in range(50)))
        assert len(pool._in_use_connections) == 0 and len(pool._available_connections) <= 2
        held = [await pool.take(), await pool.take()]
        started = time.monotonic()
        with pytest.raises(berth.BackendError, match="pool_timeout"):
            await backend.get("k")
        assert time.monotonic() - started < 5
        for conn in held:
            pool.give(conn)
        killed = sum(1 for c in admin.client_list() if c.get("name") == name and admin.client_kill_filter(_id=c["id"]))
        assert killed >= 1
        await asyncio.sleep(0.05)  # the server's goodbye reaches the idle sockets
        assert await backend.get("k") == (b"v", token), "a connection the server closed is replaced before use"

    loop = asyncio.new_event_loop()
    queue = multiprocessing.get_context("fork").SimpleQueue()

    def child() -> None:
        async def calls() -> tuple[int, bool]:
            token = await backend.put("c", b"child")
            return await client_id(), await backend.get("c") == (b"child", token)

        try:
            queue.put(asyncio.run(calls()))
        except BaseException as exc:  # reported to the parent
            queue.put((0, repr(exc)))

    try:
        loop.run_until_complete(parent())
        parent_id = loop.run_until_complete(client_id())
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(timeout=30)
        child_id, ok = queue.get()
        assert process.exitcode == 0 and ok is True, ok
        assert child_id not in (0, parent_id), "the child must not talk over the parent's socket"
        assert loop.run_until_complete(client_id()) == parent_id, "the parent's connection survives the child"
        loop.run_until_complete(backend.aclose())
    finally:
        loop.close()
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


@pytest.mark.redis
def test_redis_async_call_timeout_bounds_a_server_that_never_answers() -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does), never answers
    port = listener.getsockname()[1]

    async def main() -> None:
        store = berth.aio.open_store(
            f"redis://127.0.0.1:{port}/0", identity="mute", sealer=_sealer(), check_durability=False, socket_timeout=0.5
        )
        started = time.monotonic()
        with pytest.raises(berth.BackendError) as info:
            await store.save("k", make_envelope())
        assert "mute" in str(info.value) and "k" in str(info.value)
        assert time.monotonic() - started < 3, "the socket timeout bounds the whole call"
        await store.aclose()

    try:
        asyncio.run(main())
    finally:
        listener.close()


@pytest.mark.postgres
def test_postgres_async_pool_replaces_connections_the_server_killed(postgres_dsn: str, pg_schema: str) -> None:
    psycopg = require("psycopg", "PostgreSQL")
    schema = pg_schema
    app = f"berth-aio-{uuid.uuid4().hex[:8]}"

    def kill() -> int:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity a, pg_terminate_backend(a.pid) t "
                "WHERE a.application_name = %s AND t",
                (app,),
            ).fetchone()
            assert row is not None
            return int(row[0])

    async def main() -> None:
        store = berth.aio.open_store(
            postgres_dsn, identity="pg", sealer=_sealer(), schema=schema, application_name=app, pool_max_size=2
        )
        await asyncio.gather(*(store.save(f"k{i}", make_envelope()) for i in range(4)))
        assert await asyncio.to_thread(kill) >= 1
        await asyncio.sleep(0.05)  # the server's goodbye reaches the idle sockets
        found = await store.load_many([f"k{i}" for i in range(4)])  # no BackendError: dead ones are dropped
        assert all(p is not None for p in found)
        with pytest.raises(berth.BackendError, match="pool_timeout|no free connection"):
            await asyncio.wait_for(_hold_all_then_call(store), timeout=30)
        await store.aclose()

    asyncio.run(main())


@pytest.mark.postgres
def test_postgres_async_pool_serves_the_first_call_after_the_server_returns(postgres_dsn: str, pg_schema: str) -> None:
    # As the sync pool (tests/backends/test_postgres.py): a server gone fails each call with a
    # BackendError, connections it had are dropped, and the very next call once it is back works.
    from urllib.parse import urlsplit, urlunsplit

    from tests.reliability._proxy import FaultProxy

    schema = pg_schema
    parts = urlsplit(postgres_dsn)
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))

        async def main() -> None:
            store = berth.aio.open_store(
                url, identity="pg", sealer=_sealer(), schema=schema, pool_max_size=3, pool_timeout=2, connect_timeout=2
            )
            await asyncio.gather(*(store.save(f"k{i}", make_envelope(f"r{i}")) for i in range(3)))
            proxy.down()  # every open connection cut, new ones refused
            for _ in range(3):
                with pytest.raises(berth.BackendError) as info:
                    await store.load("k0")
                assert "pg" in str(info.value) and "k0" in str(info.value)
            proxy.up()
            started = time.monotonic()
            found = await store.load_many(["k0", "k1", "k2"])
            assert [p.envelope.run_id for p in found if p is not None] == ["r0", "r1", "r2"]
            assert await store.claim("k0") is not None and await store.load("k0") is None
            assert time.monotonic() - started < 1.0, "no reconnect schedule to wait out"
            await store.aclose()

        asyncio.run(main())


@pytest.mark.postgres
def test_postgres_async_pool_in_a_forked_child_opens_its_own_connections(postgres_dsn: str, pg_schema: str) -> None:
    import multiprocessing

    backend = berth.aio.open_backend(postgres_dsn, schema=pg_schema, pool_max_size=1)

    async def backend_pid() -> int:
        pool = backend._pool  # type: ignore[attr-defined]
        lease = await pool.take()
        try:
            cur = await lease.conn.execute("SELECT pg_backend_pid()")
            row = await cur.fetchone()
            return int(row[0])
        finally:
            await pool.give(lease)

    async def child_calls() -> tuple[int, bool]:
        token = await backend.put("i/c", b"child")
        return await backend_pid(), await backend.get("i/c") == (b"child", token)

    loop = asyncio.new_event_loop()
    queue = multiprocessing.get_context("fork").SimpleQueue()

    def child() -> None:
        try:
            queue.put(asyncio.run(child_calls()))  # a loop of its own, and connections of its own
        except BaseException as exc:  # reported to the parent
            queue.put((0, repr(exc)))

    try:
        loop.run_until_complete(backend.put("i/k", b"parent"))
        parent_pid = loop.run_until_complete(backend_pid())  # the pool's one idle connection
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(timeout=30)
        child_pid, ok = queue.get()
        assert process.exitcode == 0 and ok is True, ok
        assert child_pid not in (0, parent_pid), "the child must not talk over the parent's socket"
        assert loop.run_until_complete(backend_pid()) == parent_pid, "the parent's connection survives the child"
        got = loop.run_until_complete(backend.get_many(["i/c", "i/k"]))
        assert [g[0] for g in got if g is not None] == [b"child", b"parent"]
        loop.run_until_complete(backend.aclose())
    finally:
        loop.close()


@pytest.mark.parametrize("kind", [pytest.param("postgresql", marks=pytest.mark.postgres),
                                  pytest.param("redis", marks=pytest.mark.redis)])  # fmt: skip
def test_a_connection_handed_to_a_waiter_cancelled_meanwhile_is_not_lost(kind: str, request: Any) -> None:
    # give() hands a connection straight to the first waiter; if that waiter's task is
    # cancelled before it runs, the connection must go on (to the next waiter or idle), not leak.
    if kind == "postgresql":
        dsn = request.getfixturevalue("postgres_dsn")
        backend: Any = berth.aio.open_backend(dsn, pool_max_size=1, pool_timeout=1.0)
    else:
        url = request.getfixturevalue("redis_url")
        backend = berth.aio.open_backend(url, check_durability=False, max_connections=1, pool_timeout=1.0)
    pool = backend._pool if kind == "postgresql" else backend.client.connection_pool

    def give(held: Any) -> Any:
        return pool.give(held)

    async def main() -> None:
        held = await pool.take()
        first = asyncio.create_task(pool.take())
        second = asyncio.create_task(pool.take())
        await asyncio.sleep(0.01)  # both wait, in order
        given = give(held)
        if asyncio.iscoroutine(given):
            await given
        first.cancel()  # handed the connection, cancelled before it ran
        with pytest.raises(asyncio.CancelledError):
            await first
        again = await asyncio.wait_for(second, 5)  # the next waiter got it, well within pool_timeout
        given = give(again)
        if asyncio.iscoroutine(given):
            await given
        await backend.aclose()

    asyncio.run(main())


async def _hold_all_then_call(store: berth.aio.AsyncStore) -> None:
    pool = store.backend._pool  # type: ignore[attr-defined]
    pool._timeout = 0.2
    held = [await pool.take(), await pool.take()]
    try:
        await store.load("k0")
    finally:
        for lease in held:
            await pool.give(lease)


def test_berth_aio_is_reachable_from_import_berth() -> None:
    assert berth.aio.open_store is not None and "aio" in berth.__all__
    assert callable(berth.aio.Coordinator)


def test_async_delete_prefix_and_listing_order() -> None:
    async def main() -> tuple[list[str], list[str], int]:
        store = berth.aio.open_store("memory://", identity="order", sealer=_sealer())
        for key in ("t1/b", "t1/a", "t10/a", "t1/c"):
            await store.save(key, make_envelope(key))
        latest = [item.key async for item in store.list("t1/", limit=1, reverse=True)]
        ordered = [item.key async for item in store.list()]
        gone = await store.delete_prefix("t1/")
        await store.aclose()
        return latest, ordered, gone

    latest, ordered, gone = asyncio.run(main())
    assert latest == ["t1/c"] and ordered == ["t1/a", "t1/b", "t1/c", "t10/a"] and gone == 3


class _UnreadableRow(MemoryBackend):
    """A memory backend that also lists one entry it cannot read as a record (a zero token, as a
    backend's `heads` reports a value of another type), and keeps what `delete_many` was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, berth.Token]] = []

    def heads(self, prefix: str, size: int) -> Iterator[Any]:
        yield from super().heads(prefix, size)
        yield prefix + "zz-not-a-record", berth.FormatError("not a record"), berth.Token.ZERO, 0

    def delete_many(self, items: Any) -> list[bool]:
        self.sent.extend(items)
        return super().delete_many(items)


def test_async_delete_prefix_is_the_sync_one_and_never_sends_the_zero_token() -> None:
    sync_backend, async_backend = _UnreadableRow(), _UnreadableRow()
    sync = berth.Store(sync_backend, identity="z", sealer=_sealer())
    for key in ("t/a", "t/b"):
        sync.save(key, make_envelope())
    removed_sync = sync.delete_prefix("t/")

    async def main() -> int:
        store = berth.aio.AsyncStore(ThreadedBackend(async_backend), identity="z", sealer=_sealer())
        for key in ("t/a", "t/b"):
            await store.save(key, make_envelope())
        return await store.delete_prefix("t/")

    removed_async = asyncio.run(main())
    assert removed_sync == removed_async == 2
    assert all(not token.is_zero for _, token in sync_backend.sent)
    assert all(not token.is_zero for _, token in async_backend.sent), async_backend.sent
    assert [name for name, _ in async_backend.sent] == [name for name, _ in sync_backend.sent]


def test_the_store_shells_are_twins_in_names_parameters_and_defaults() -> None:
    """`Store` and `berth.aio.AsyncStore` are two thin drivers over one core and one set of plans: the same
    public methods with the same parameters, kinds and defaults, so drift (as `delete_prefix`'s was) fails here."""
    import inspect

    def face(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    only_sync, only_async = (
        face(berth.Store) - face(berth.aio.AsyncStore),
        face(berth.aio.AsyncStore) - face(berth.Store),
    )
    assert only_sync == {"close"} and only_async == {"aclose", "sync"}, (only_sync, only_async)
    for name in sorted(face(berth.Store) & face(berth.aio.AsyncStore)) + ["__init__"]:
        sync, aio = getattr(berth.Store, name), getattr(berth.aio.AsyncStore, name)
        assert callable(sync) == callable(aio), name
        if callable(sync):
            shape = [(p.name, p.kind, p.default) for p in inspect.signature(sync).parameters.values()]
            assert shape == [(p.name, p.kind, p.default) for p in inspect.signature(aio).parameters.values()], name
    for store in (berth.Store(MemoryBackend(), identity="t", sealer=_sealer()),
                  berth.aio.AsyncStore(ThreadedBackend(MemoryBackend()), identity="t", sealer=_sealer())):  # fmt: skip
        assert {"backend", "core", "frames", "steps"} <= set(vars(store)) | set(dir(store))
