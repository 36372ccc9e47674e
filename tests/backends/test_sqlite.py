from __future__ import annotations

import functools
import os
import stat
import tracemalloc
from datetime import datetime, timezone

import pytest

import berth
from berth.backends.sqlite import SqliteBackend
from berth.testing import AsyncStoreContract, StoreContract, make_envelope


class TestSqliteContract(StoreContract):
    @pytest.fixture
    def backend_opener(self, tmp_path):
        return functools.partial(SqliteBackend, str(tmp_path / "berth.db"))


class TestSqliteAsyncContract(AsyncStoreContract, TestSqliteContract):
    """The same cases through berth.aio (this backend in worker threads)."""


def test_database_file_is_private(tmp_path) -> None:
    old = os.umask(0)
    try:
        store = berth.open_store(f"sqlite:///{tmp_path}/d/b.db", identity="x", sealer=berth.PlaintextSealer())
        store.save("k", make_envelope())
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o700
    for f in (tmp_path / "d").iterdir():
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f


def test_wal_mode(tmp_path) -> None:
    backend = SqliteBackend(str(tmp_path / "b.db"))
    assert backend._conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert backend._conn().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_generation_never_reused_after_delete(tmp_path) -> None:
    backend = SqliteBackend(str(tmp_path / "b.db"))
    first = backend.put("i/k", b"1")
    backend.delete("i/k", first)
    second = backend.put("i/k", b"1")
    assert second != first


def test_listing_memory_stays_flat(tmp_path) -> None:
    store = berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="x", sealer=berth.PlaintextSealer())
    state = {"blob": "x" * 4096}

    def peak_for(n: int) -> int:
        for i in range(n):
            store.save(f"k{n}/{i:05d}", make_envelope(provider_state=state))
        tracemalloc.start()
        count = sum(1 for _ in store.list(f"k{n}/"))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count == n
        return peak

    small, large = peak_for(1000), peak_for(4000)
    assert large < small * 2, (small, large)


def test_no_read_transaction_stays_open_between_calls(tmp_path) -> None:
    # The backend keeps one cursor per thread: a load must not leave its statement (and with it a
    # WAL snapshot) open, or checkpoints would starve while the host holds a Parked.
    import sqlite3

    backend = SqliteBackend(str(tmp_path / "b.db"))
    backend.put("i/k", b"frame")
    assert backend.get("i/k") is not None
    other = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    other.execute("INSERT OR REPLACE INTO berth_frames(name, gen, data) VALUES ('i/x', 1, x'00')")
    busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0
    assert os.path.getsize(tmp_path / "b.db-wal") == 0  # truncated: no reader held a snapshot
    # The check can fail: a statement left mid-way (here a scan stopped after one row) holds a snapshot.
    held = backend._conn().execute("SELECT name FROM berth_frames")
    held.fetchone()
    other.execute("INSERT OR REPLACE INTO berth_frames(name, gen, data) VALUES ('i/y', 1, x'00')")
    assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 1
    held.close()
    other.close()
    backend.close()


# --- issue 12: values of another type, deleted bytes, parents under umask 0 -----------------


@pytest.mark.parametrize("value", ["a text value", 12345], ids=["TEXT", "INTEGER"])
def test_a_row_of_another_type_is_a_format_error_everywhere(tmp_path, value) -> None:
    import sqlite3

    store = berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="id", sealer=berth.PlaintextSealer())
    store.save("good", make_envelope("good"))
    store.save("bad", make_envelope("bad"))
    with sqlite3.connect(tmp_path / "b.db") as db:
        db.execute("UPDATE berth_frames SET data = ? WHERE name = 'id/bad'", (value,))
    db.close()
    for call in (lambda: store.load("bad"), lambda: store.claim("bad")):
        with pytest.raises(berth.FormatError, match="'id/bad'"):
            call()
    items = {i.key: i.error for i in store.list()}
    assert items["good"] is None and items["bad"]
    assert store.sweep(now=datetime(2100, 1, 1, tzinfo=timezone.utc)) == 0
    assert store.reseal().failed == 1
    coordinator = berth.Coordinator(store, berth.open_questions(f"sqlite:///{tmp_path}/q.db", identity="id"))
    wake = coordinator.wake("bad")
    assert wake.decision is berth.WakeDecision.REARM and isinstance(wake.error, berth.FormatError)


def test_deleted_frames_leave_no_bytes_behind(tmp_path, monkeypatch) -> None:
    import sqlite3

    connect = sqlite3.connect

    def connect_without_secure_delete(*args, **kwargs):  # as SQLite builds without SQLITE_SECURE_DELETE open
        conn = connect(*args, **kwargs)
        conn.execute("PRAGMA secure_delete=OFF")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect_without_secure_delete)
    marker = "deleted-marker-7f3a"
    store = berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="id", sealer=berth.PlaintextSealer())
    assert isinstance(store.backend, SqliteBackend)
    assert store.backend._conn().execute("PRAGMA secure_delete").fetchone()[0] == 1
    for i in range(20):
        store.save(f"k{i}", make_envelope(provider_state={"text": marker * 50}))
    store.save("kept", make_envelope())
    for i in range(20):
        assert store.claim(f"k{i}") is not None
    store.close()
    for f in tmp_path.iterdir():
        assert marker.encode() not in f.read_bytes(), f"{f.name} keeps a deleted frame's bytes"


def test_missing_parents_are_created_0700_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        berth.open_store(f"sqlite:///{tmp_path}/a/b/c/d.db", identity="x", sealer=berth.PlaintextSealer()).close()
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d


# --- issue 15.3: writers take turns ---------------------------------------------------------


def test_a_writer_waits_for_its_turn_and_then_writes(tmp_path) -> None:
    import fcntl
    import threading
    import time

    backend = SqliteBackend(str(tmp_path / "b.db"))
    backend.put("i/warm", b"x")
    lock = tmp_path / "b.db-lock"
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    holder = os.open(lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another writer's turn
    done: list[float] = []
    writer = threading.Thread(target=lambda: (backend.put("i/k", b"frame"), done.append(time.monotonic())))
    writer.start()
    time.sleep(0.2)
    assert not done, "a write went ahead during another writer's turn"
    released = time.monotonic()
    fcntl.flock(holder, fcntl.LOCK_UN)
    writer.join(5)
    assert done and done[0] - released < 0.5
    assert backend.get("i/k") is not None
    os.close(holder)
    backend.close()


def test_a_turn_never_taken_back_goes_on_to_sqlite_after_busy_timeout(tmp_path) -> None:
    # A writer stopped while holding its turn does not hang the others: SQLite's own lock decides.
    import fcntl
    import time

    backend = SqliteBackend(str(tmp_path / "b.db"), busy_timeout=0.3)
    holder = os.open(tmp_path / "b.db-lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    t0 = time.monotonic()
    token = backend.put("i/k", b"frame")
    assert 0.3 <= time.monotonic() - t0 < 3
    backend.delete("i/k", token)
    assert backend.get("i/k") is None
    os.close(holder)
    backend.close()


def test_large_frames_are_written_by_blob_io_under_every_condition(tmp_path) -> None:
    # issue 15.6: frames of 1 MiB and more go into a zeroblob piece by piece (not bound whole)
    from berth.backends import sqlite as module

    backend = SqliteBackend(str(tmp_path / "b.db"))
    big = bytes(range(256)) * ((3 * module._BLOB_PIECE) // 256) + b"tail"
    other = big[::-1]
    token = backend.put("i/k", big)
    assert backend.get("i/k") == (big, token)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", other, if_absent=True)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", other, if_match=berth.Token(int(token.value) + 1))
    assert backend.get("i/k") == (big, token)  # a refused condition wrote nothing
    second = backend.put("i/k", bytearray(other), if_match=token)  # type: ignore[arg-type]  # a bytearray, on purpose
    assert second != token and backend.get("i/k") == (other, second)
    third = backend.put("i/new", big, if_absent=True)
    assert backend.get("i/new") == (big, third)
    backend.delete("i/k", second)
    assert backend.get("i/k") is None
    backend.close()


def test_a_large_write_that_fails_midway_leaves_the_old_frame_and_no_transaction(tmp_path) -> None:
    from berth.backends import sqlite as module

    backend = SqliteBackend(str(tmp_path / "b.db"))
    old = b"o" * (2 * module._BLOB_PIECE)
    token = backend.put("i/k", old)
    conn = backend._conn()

    class Broken:
        def __init__(self, blob):
            self.blob, self.writes = blob, 0

        def __enter__(self):
            self.blob.__enter__()
            return self

        def __exit__(self, *exc):
            return self.blob.__exit__(*exc)

        def write(self, data):
            self.writes += 1
            if self.writes == 2:
                raise OSError("disk went away")
            self.blob.write(data)

    class BrokenBlobs:  # the thread's connection, whose blobs fail at their second write
        def blobopen(self, *args):
            return Broken(conn.blobopen(*args))

        def __getattr__(self, name):
            return getattr(conn, name)

    backend._local.conn = BrokenBlobs()
    with pytest.raises(OSError, match="disk went away"):
        backend.put("i/k", b"n" * (2 * module._BLOB_PIECE))
    backend._local.conn = conn
    assert not conn.in_transaction
    assert backend.get("i/k") == (old, token)
    assert backend.put("i/k", b"fine", if_match=token)
    backend.close()


def test_a_batch_delete_whose_commit_fails_rolls_back(tmp_path) -> None:
    import sqlite3

    backend = SqliteBackend(str(tmp_path / "b.db"))
    tokens = [backend.put(f"i/{n}", b"frame") for n in range(3)]
    conn = backend._conn()

    class FailingCommit:  # the thread's connection, whose COMMIT fails (disk full, say)
        def execute(self, sql, *args):
            if sql == "COMMIT":
                raise sqlite3.OperationalError("database or disk is full")
            return conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(conn, name)

    backend._local.conn = FailingCommit()
    with pytest.raises(berth.BackendError, match="disk is full"):
        backend.delete_many([(f"i/{n}", t) for n, t in enumerate(tokens)])
    backend._local.conn = conn
    assert not conn.in_transaction
    assert [backend.get(f"i/{n}") is not None for n in range(3)] == [True, True, True]
    assert backend.delete_many([(f"i/{n}", t) for n, t in enumerate(tokens)]) == [True, True, True]
    backend.close()
