"""The postgresql:// backend against a real server: the full contract plus what only PostgreSQL has."""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import berth
from berth.testing import AsyncStoreContract, StoreContract, make_envelope
from tests.conftest import require
from tests.reliability._proxy import FaultProxy

psycopg = require("psycopg", "PostgreSQL")
from berth.backends.postgres import SCHEMA_VERSION, AsyncPostgresBackend, PostgresBackend  # noqa: E402

pytestmark = pytest.mark.postgres


@pytest.fixture
def fresh_schema(postgres_dsn: str) -> Iterator[str]:
    """A schema name no other test uses; dropped (with everything in it) afterwards."""
    schema = f"berth_t_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def open_backend(postgres_dsn: str, fresh_schema: str) -> Iterator[Callable[..., PostgresBackend]]:
    opened: list[PostgresBackend] = []

    def make(**options: Any) -> PostgresBackend:
        options.setdefault("schema", fresh_schema)
        options.setdefault("pool_max_size", 4)
        backend = PostgresBackend.from_url(options.pop("url", postgres_dsn), **options)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


class TestPostgresContract(StoreContract):
    @pytest.fixture
    def backend_opener(self, postgres_dsn: str, fresh_schema: str) -> Callable[[], PostgresBackend]:
        return functools.partial(PostgresBackend.from_url, postgres_dsn, schema=fresh_schema, pool_max_size=4)


class TestPostgresAsyncContract(AsyncStoreContract, TestPostgresContract):
    """The same cases through berth.aio, on psycopg's AsyncConnection (natively async)."""

    @pytest.fixture
    def async_backend_opener(self, postgres_dsn: str, fresh_schema: str) -> Callable[[], AsyncPostgresBackend]:
        return functools.partial(AsyncPostgresBackend.from_url, postgres_dsn, schema=fresh_schema, pool_max_size=4)


def _sealed_store(backend: PostgresBackend, identity: str = "pg") -> berth.Store:
    return berth.Store(backend, identity=identity, sealer=berth.AesGcmSealer(berth.Keyring.generate()))


# --- migration ------------------------------------------------------------------------------


def test_setup_is_idempotent_versioned_and_safe_to_race(open_backend, postgres_dsn, fresh_schema) -> None:
    backends = [open_backend() for _ in range(4)]
    results: list[object] = []
    barrier = threading.Barrier(len(backends))

    def run(b: PostgresBackend) -> None:
        barrier.wait()
        try:
            results.append(b.setup())
        except Exception as exc:  # collected and asserted below
            results.append(exc)

    threads = [threading.Thread(target=run, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [SCHEMA_VERSION] * 4
    assert open_backend().setup() == SCHEMA_VERSION
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        rows = admin.execute(f'SELECT table_name, version FROM "{fresh_schema}".berth_schema_version').fetchall()
        assert rows == [("frames", SCHEMA_VERSION)]
        storage, collation = admin.execute(
            "SELECT a.attstorage, c.collname FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation "
            "WHERE a.attrelid = %s::regclass AND a.attname IN ('data', 'name') ORDER BY a.attname",
            (f'"{fresh_schema}".frames',),
        ).fetchall()
        assert storage[0] == "e", "the frame column must be STORAGE EXTERNAL (sealed frames do not compress)"
        assert collation[1] == "C", "names must be C-collated so prefix ranges use the primary key"


def test_first_use_sets_up_lazily(open_backend) -> None:
    backend = open_backend()
    token = backend.put("i/k", b"data")
    assert backend.get("i/k") == (b"data", token)


def test_a_newer_schema_is_refused(open_backend, postgres_dsn, fresh_schema) -> None:
    open_backend().setup()
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'UPDATE "{fresh_schema}".berth_schema_version SET version = 99')
    with pytest.raises(berth.BackendError, match="newer"):
        open_backend().get("i/k")


def test_bad_schema_or_table_names_are_refused_before_any_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_io(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(psycopg, "connect", no_io)
    bad: list[dict[str, Any]] = [
        {"schema": 'x"; DROP TABLE y; --'},
        {"table": "1abc"},
        {"schema": ""},
        {"table": "x" * 49},
    ]
    for options in bad:
        with pytest.raises(berth.BerthError) as info:
            PostgresBackend("postgresql://nobody@127.0.0.1:1/none", **options)
        assert not isinstance(info.value, berth.BackendError), "refused by a failed connection, not by the check"
        ((what, value),) = options.items()
        assert f"{what} {value!r} must be" in str(info.value)


def test_url_options(postgres_dsn, fresh_schema) -> None:
    app = f"berth-url-{uuid.uuid4().hex[:8]}"
    url = f"{postgres_dsn}?schema={fresh_schema}&table=parked&pool_max_size=2&application_name={app}"
    store = berth.open_store(url, identity="u", sealer=berth.AesGcmSealer(berth.Keyring.generate()))
    try:
        store.save("k", make_envelope())
        assert isinstance(store.backend, PostgresBackend)
        assert (store.backend.schema, store.backend.table) == (fresh_schema, "parked")
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            seen = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,))
            assert seen.fetchone()[0] >= 1, "a libpq parameter in the URL reaches the server"
            count = admin.execute(f'SELECT count(*) FROM "{fresh_schema}".parked').fetchone()[0]
            assert count == 1
    finally:
        store.close()
    with pytest.raises(berth.BerthError, match="pool_max_size"):
        PostgresBackend.from_url(f"{postgres_dsn}?pool_max_size=many")


# --- names and generations --------------------------------------------------------------------


def test_tables_and_schemas_do_not_collide(open_backend, postgres_dsn) -> None:
    a, b = open_backend(table="frames_a"), open_backend(table="frames_b")
    a.put("i/k", b"in a")
    assert b.get("i/k") is None and list(b.scan("")) == []
    b.put("i/k", b"in b")
    assert a.get("i/k")[0] == b"in a" and b.get("i/k")[0] == b"in b"


def test_prefix_scan_is_exact_for_like_metacharacters_and_unicode(open_backend) -> None:
    backend = open_backend()
    names = [
        "x/a%b",
        "x/a_b",
        "x/aXb",
        "x/a\\b",
        "x/é",
        "x/é/1",
        "x/" + chr(0x10FFFF),
        "x/" + chr(0x10FFFF) + "z",
        "x0",
        "y/a%b",
    ]
    for name in names:
        backend.put(name, name.encode())
    assert list(backend.scan("x/a%")) == ["x/a%b"]
    assert list(backend.scan("x/a_")) == ["x/a_b"]
    assert list(backend.scan("x/a\\")) == ["x/a\\b"]
    assert list(backend.scan("x/é")) == ["x/é", "x/é/1"]
    assert list(backend.scan("x/" + chr(0x10FFFF))) == ["x/" + chr(0x10FFFF), "x/" + chr(0x10FFFF) + "z"]
    assert sorted(backend.scan("x/")) == sorted(n for n in names if n.startswith("x/"))
    assert [h[0] for h in backend.heads("x/a", 2)] == ["x/a%b", "x/aXb", "x/a\\b", "x/a_b"]


def test_generation_never_reused_after_delete_and_recreate(open_backend) -> None:
    backend = open_backend()
    seen = []
    for _ in range(5):
        token = backend.put("i/k", b"v")
        seen.append(token.value)
        backend.delete("i/k", token)
        with pytest.raises(berth.TokenMismatch):
            backend.delete("i/k", token)
    assert seen == sorted(set(seen)), seen
    other = open_backend()  # another pool, another connection: still the same sequence
    assert other.put("i/k", b"v").value > seen[-1]


def test_tokens_that_are_not_generations_mismatch_without_io(open_backend) -> None:
    backend = open_backend()
    backend.put("i/k", b"v")
    for token in (berth.Token("etag"), berth.Token(-1), berth.Token(2**64), berth.Token(True)):
        with pytest.raises(berth.TokenMismatch):
            backend.delete("i/k", token)
        with pytest.raises(berth.TokenMismatch):
            backend.put("i/k", b"w", if_match=token)
    assert backend.get("i/k")[0] == b"v"


def test_heads_read_only_the_header(open_backend, postgres_dsn) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB, stored out of line
    token = open_backend().put("i/big", big)
    parts = urlsplit(postgres_dsn)
    user = f"{parts.username}@" if parts.username else ""
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        reader = open_backend(url=urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}")))
        assert reader.get("i/none") is None  # connect and check the schema first
        before = proxy.received
        assert list(reader.heads("i/", 16)) == [("i/big", big[:16], token, len(big))]
        read = proxy.received - before
    assert read < 16 * 1024, f"listing the head of a 1 MiB frame read {read} bytes from the server"


def test_prefix_pages_use_the_primary_key(open_backend, postgres_dsn, fresh_schema) -> None:
    open_backend().setup()
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(
            f'INSERT INTO "{fresh_schema}".frames (name, gen, data) '
            f"SELECT 'id' || (g % 2) || '/key' || g, g, '\\x00'::bytea FROM generate_series(1, 20000) g"
        )
        admin.execute(f'ANALYZE "{fresh_schema}".frames')
        backend = open_backend()
        query = backend._q["heads:False:True:False"].decode()  # kind:first:bounded:reverse
        plan = "\n".join(
            r[0]
            for r in admin.execute(
                f"EXPLAIN {query}".replace("%(size)s", "1024")
                .replace("%(after)s", "'id1/key5001'")
                .replace("%(below)s", "'id10'")
                .replace("%(n)s", "500")
            )
        )
        assert "Index Scan" in plan and "frames_pkey" in plan, plan
        assert "Seq Scan" not in plan and "Sort" not in plan, plan
    assert sum(1 for _ in backend.scan("id1/")) == 10000


# --- killed connections -------------------------------------------------------------------------


def _waiting_pid(dsn: str, app: str, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as admin:
        while time.monotonic() < deadline:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (app,)
            ).fetchone()
            if row is not None:
                return int(row[0])
            time.sleep(0.02)
    raise AssertionError(f"no connection of {app} is waiting on the row lock")


def _terminate(dsn: str, pid: int | None = None, app: str | None = None) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        if pid is not None:
            return int(admin.execute("SELECT count(*) FROM pg_terminate_backend(%s) t WHERE t", (pid,)).fetchone()[0])
        return int(
            admin.execute(
                "SELECT count(*) FROM pg_stat_activity a, pg_terminate_backend(a.pid) t "
                "WHERE a.application_name = %s AND t",
                (app,),
            ).fetchone()[0]
        )


def _blocked_call(dsn: str, schema: str, name: str, app: str, call: Callable[[], object]) -> object:
    """Run `call` while another session holds the row lock; kill the call's connection while it waits."""
    outcome: list[object] = []
    with psycopg.connect(dsn) as locker:  # a transaction that holds the row lock until rollback
        locker.execute(f'SELECT 1 FROM "{schema}".frames WHERE name = %s FOR UPDATE', (name,))

        def run() -> None:
            try:
                outcome.append(call())
            except Exception as exc:  # the outcome is asserted by the caller
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        assert _terminate(dsn, pid=_waiting_pid(dsn, app)) == 1
        thread.join(timeout=30)
        locker.rollback()
    assert not thread.is_alive() and len(outcome) == 1
    return outcome[0]


@pytest.mark.parametrize("operation", ["claim", "delete", "save"])
def test_connection_killed_mid_operation_is_a_backend_error_never_a_false_success(
    operation, open_backend, postgres_dsn, fresh_schema
) -> None:
    app = f"berth-kill-{uuid.uuid4().hex[:8]}"
    store = _sealed_store(open_backend(application_name=app, pool_max_size=2))
    store.save("k", make_envelope("before"))
    parked = store.load("k")
    assert parked is not None
    calls = {
        "claim": lambda: store.claim("k"),
        "delete": lambda: store.delete("k", parked.token),
        "save": lambda: store.save("k", make_envelope("after")),
    }
    outcome = _blocked_call(postgres_dsn, fresh_schema, "pg/k", app, calls[operation])
    assert isinstance(outcome, berth.BackendError), f"{operation} under a killed connection returned {outcome!r}"
    assert "pg" in str(outcome) and "k" in str(outcome)
    again = store.load("k")  # the store works again, and nothing changed: the statement never committed
    assert again is not None and again.token == parked.token and again.envelope.run_id == "before"
    assert store.claim("k") is not None and store.load("k") is None


def test_idle_pool_connections_killed_between_calls_are_replaced(open_backend, postgres_dsn) -> None:
    app = f"berth-idle-{uuid.uuid4().hex[:8]}"
    store = _sealed_store(open_backend(application_name=app, pool_max_size=2))
    store.save("k", make_envelope())
    assert _terminate(postgres_dsn, app=app) >= 1
    time.sleep(0.05)  # the server's goodbye reaches the idle socket
    parked = store.load("k")  # no BackendError: a dead idle connection is noticed before use
    assert parked is not None
    store.delete("k", parked.token)
    assert store.load("k") is None


def test_calls_recover_at_once_when_the_server_returns(open_backend, postgres_dsn, fresh_schema) -> None:
    # A proxy that refuses connections stands in for a server that is down; once it
    # forwards again the very next call must work (no reconnect backoff to wait out).
    import socket

    upstream = urlsplit(postgres_dsn)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    state = {"up": False}

    def pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            a.close()
            b.close()

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if not state["up"]:
                client.close()
                continue
            server = socket.create_connection((upstream.hostname or "127.0.0.1", upstream.port or 5432))
            threading.Thread(target=pump, args=(client, server), daemon=True).start()
            threading.Thread(target=pump, args=(server, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        url = urlunsplit(upstream._replace(netloc=f"{upstream.username}@127.0.0.1:{port}"))
        backend = open_backend(url=url, pool_timeout=2.0, connect_timeout=2)
        for _ in range(5):
            with pytest.raises(berth.BackendError):
                backend.put("i/k", b"v")
        state["up"] = True
        started = time.monotonic()
        token = backend.put("i/k", b"v")
        assert backend.get("i/k") == (b"v", token)
        assert time.monotonic() - started < 1.0
    finally:
        listener.close()


def test_a_server_that_is_not_there_is_a_backend_error() -> None:
    backend = PostgresBackend("postgresql://postgres@127.0.0.1:1/test", pool_timeout=1.0, connect_timeout=1)
    try:
        with pytest.raises(berth.BackendError):
            backend.get("i/k")
        with pytest.raises(berth.BackendError):
            list(backend.scan("i/"))
    finally:
        backend.close()


# --- the pool -------------------------------------------------------------------------------------


def _sessions(dsn: str, app: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        return int(
            admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()[0]
        )


def test_pool_max_size_bounds_connections_and_pool_timeout_bounds_the_wait(
    open_backend, postgres_dsn, fresh_schema
) -> None:
    app = f"berth-full-{uuid.uuid4().hex[:8]}"
    backend = open_backend(application_name=app, pool_max_size=2, pool_timeout=0.5)
    token = backend.put("i/k", b"v")
    outcomes: list[object] = []

    def blocked_delete() -> None:
        try:
            outcomes.append(backend.delete("i/k", token))
        except Exception as exc:  # asserted below
            outcomes.append(exc)

    with psycopg.connect(postgres_dsn) as locker:  # holds the row lock: both pooled connections wait on it
        locker.execute(f'SELECT 1 FROM "{fresh_schema}".frames WHERE name = %s FOR UPDATE', ("i/k",))
        threads = [threading.Thread(target=blocked_delete) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                waiting = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                    (app,),
                ).fetchone()[0]
            if waiting == 2:
                break
            time.sleep(0.02)
        assert waiting == 2
        started = time.monotonic()
        with pytest.raises(berth.BackendError, match="pool_timeout") as caught:
            backend.get("i/k")
        assert 0.4 < time.monotonic() - started < 5
        assert "i/k" in str(caught.value)
        assert _sessions(postgres_dsn, app) == 2
        locker.rollback()
    for t in threads:
        t.join(timeout=10)
    assert outcomes.count(None) == 1 and sum(isinstance(o, berth.TokenMismatch) for o in outcomes) == 1, outcomes
    assert backend.get("i/k") is None  # the pool works again once connections come back


def test_more_threads_than_connections_all_get_served(open_backend, postgres_dsn) -> None:
    app = f"berth-busy-{uuid.uuid4().hex[:8]}"
    backend = open_backend(application_name=app, pool_max_size=2, pool_timeout=30)
    errors: list[BaseException] = []
    peak = [0]

    def work(i: int) -> None:
        try:
            for j in range(40):
                name = f"t{i}/{j}"
                token = backend.put(name, b"x" * j)
                assert backend.get(name) == (b"x" * j, token)
                backend.delete(name, token)
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak[0] = max(peak[0], _sessions(postgres_dsn, app))
        time.sleep(0.01)
    assert errors == []
    assert 1 <= peak[0] <= 2


def test_a_forked_child_opens_its_own_connections_and_leaves_the_parents_alone(open_backend) -> None:
    import multiprocessing

    backend = open_backend(pool_max_size=1)
    backend.put("i/k", b"parent")

    def backend_pid() -> int:
        with backend._pool.connection() as conn:
            return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

    parent_pid = backend_pid()  # the pool's one idle connection
    queue = multiprocessing.get_context("fork").SimpleQueue()

    def child() -> None:
        try:
            token = backend.put("i/c", b"child")
            queue.put((backend_pid(), backend.get("i/c") == (b"child", token)))
        except BaseException as exc:  # reported to the parent
            queue.put((0, repr(exc)))
        finally:
            backend.close()

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(timeout=30)
    child_pid, ok = queue.get()
    assert process.exitcode == 0 and ok is True, ok
    assert child_pid not in (0, parent_pid), "the child must not talk over the parent's socket"
    assert backend_pid() == parent_pid, "the parent's idle connection survives the child's exit"
    assert backend.get("i/c")[0] == b"child" and backend.get("i/k")[0] == b"parent"


def test_pooled_cursors_keep_no_large_frame(open_backend) -> None:
    backend = open_backend(pool_max_size=1)
    small, large = b"s" * 100, bytes(range(256)) * 8192  # 2 MiB: over the bound a kept cursor may hold
    backend.get("i/none")
    backend.put("i/s", small)
    assert backend.get("i/s")[0] == small
    (lease,) = backend._pool._idle
    assert {"put", "get"} <= set(lease.cursors), "small statements keep their cursors"
    token = backend.put("i/l", large)
    assert backend.get("i/l") == (large, token)
    # A large frame's put goes by COPY on a cursor of its own, its get returns no data (it is read
    # in pieces): the kept put and get cursors never see it, and the piece reader is not kept.
    moved = {"get_piece", "put:upload", "upload"}
    assert not moved & set(lease.cursors), "a cursor that moved a large frame is closed"
    backend.put("i/l", small, if_match=token)
    assert backend.get("i/l")[0] == small


def test_a_large_frame_is_read_in_pieces_and_never_mixes_two_saves(open_backend, monkeypatch) -> None:
    # issue 15.6: a frame over _WHOLE is not sent in one row (libpq's buffer, its result and
    # psycopg's bytes each held it: 3x the state); it is read a piece at a time at its generation
    from berth.backends.postgres import _sql as module

    monkeypatch.setattr(module, "_PIECE", 300_000)  # pieces, and a short last one
    backend = open_backend(pool_max_size=1)
    first = bytes(range(256)) * 6000 + b"end"  # ~1.5 MiB, over _WHOLE
    second = first[::-1] + b"more"
    token = backend.put("i/l", bytearray(first))  # a bytearray frame goes as a view, not copied
    assert backend.get("i/l") == (first, token)
    run = backend._run
    resaved: list[Any] = []

    def run_and_resave_once(what, name, key, params, **kw):
        row = run(what, name, key, params, **kw)
        if key == "get_piece" and not resaved:  # another writer saves between two pieces
            resaved.append(backend.put("i/l", second))
        return row

    monkeypatch.setattr(backend, "_run", run_and_resave_once)
    data, got = backend.get("i/l")
    assert (bytes(data), got) == (second, resaved[0]), "a read across a re-save starts again, never mixes"
    monkeypatch.setattr(backend, "_run", run)
    store = _sealed_store(backend)
    state = b"[" + b",".join(b'"%d"' % i for i in range(300_000)) + b"]"
    store.save("big", berth.Envelope(provider_state=state))
    assert store.load("big").envelope.provider_state == state
    assert store.claim("big") is not None and backend.get("pg/big") is None


def test_a_large_frame_is_saved_by_copy_under_every_condition(open_backend) -> None:
    # issue 15.6: a frame over _WHOLE is streamed by COPY into a temporary table, not bound whole
    backend = open_backend(pool_max_size=1)
    big = bytes(range(256)) * 5000 + b"tail"
    other = big[::-1]
    token = backend.put("i/k", bytearray(big))
    assert backend.get("i/k") == (big, token)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", other, if_absent=True)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", other, if_match=berth.Token(token.value + 1000))
    assert backend.get("i/k") == (big, token), "a refused condition wrote nothing"
    second = backend.put("i/k", other, if_match=token)
    assert second != token and backend.get("i/k") == (other, second)
    assert backend._run("load", "-", "version", ("-",)) is not None  # the connection is usable after
    (lease,) = backend._pool._idle
    assert lease.conn.execute("SELECT count(*) FROM pg_temp.berth_upload").fetchone()[0] == 0  # emptied at commit
    # A role without the TEMP privilege: the same put by parameter, from then on.
    backend._q["upload_table"] = b"DO $$ BEGIN RAISE insufficient_privilege; END $$"
    third = backend.put("i/k", big, if_match=second)
    assert backend.get("i/k") == (big, third) and backend._upload is False


def test_a_large_frame_through_the_async_backend(open_backend) -> None:
    import asyncio

    backend = open_backend(pool_max_size=1)
    big = bytes(range(256)) * 5000

    async def round_trip() -> None:
        native = AsyncPostgresBackend(backend)
        token = await native.put("i/a", big)  # COPY, on the sync pool in a worker thread
        data, got = await native.get("i/a")  # ranged reads, natively
        assert (bytes(data), got) == (big, token)
        with pytest.raises(berth.TokenMismatch):
            await native.put("i/a", big, if_absent=True)
        await native.delete("i/a", token)
        assert await native.get("i/a") is None
        await native.aclose()

    asyncio.run(round_trip())


def test_close_while_a_call_runs_closes_its_connection_when_it_returns(open_backend, postgres_dsn) -> None:
    app = f"berth-close-{uuid.uuid4().hex[:8]}"
    backend = open_backend(application_name=app, pool_max_size=2)
    backend.put("i/k", b"v")
    with backend._pool.connection():  # a call in flight
        backend.close()
    with pytest.raises(berth.BackendError, match="closed"):
        backend.get("i/k")
    deadline = time.monotonic() + 5  # the server notices a closed session a moment later
    while _sessions(postgres_dsn, app) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _sessions(postgres_dsn, app) == 0


# --- permissions ---------------------------------------------------------------------------------

DOCUMENTED_GRANTS = [  # docs/backends/postgresql.md, "Permissions"
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.frames TO {role}",
    "GRANT USAGE ON SEQUENCE {schema}.frames_gen TO {role}",
    "GRANT SELECT ON {schema}.berth_schema_version TO {role}",
]


def test_documented_grants_are_enough_for_an_application_role(open_backend, postgres_dsn, fresh_schema) -> None:
    role = f"berth_app_{uuid.uuid4().hex[:8]}"
    open_backend().setup()  # as the owner
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            for grant in DOCUMENTED_GRANTS:
                admin.execute(grant.format(schema=f'"{fresh_schema}"', role=f'"{role}"'))
            app_dsn = postgres_dsn.replace("postgres@", f"{role}@", 1)
            assert app_dsn != postgres_dsn
            app = PostgresBackend.from_url(app_dsn, schema=fresh_schema)
            try:
                store = _sealed_store(app)
                store.save("k", make_envelope(deadline=store.now() - timedelta(seconds=1)))
                store.save("j", make_envelope())
                assert sorted(i.key for i in store.list()) == ["j", "k"]
                assert store.sweep() == 1
                assert store.claim("j") is not None
                app.put("pg/x", b"v", if_match=app.put("pg/x", b"v"))  # the conditional write of reseal
                other = PostgresBackend.from_url(app_dsn, schema=fresh_schema, table="other")
                with pytest.raises(berth.BackendError, match="permission denied"):
                    other.setup()
                other.close()
            finally:
                app.close()
        finally:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
