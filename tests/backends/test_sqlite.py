from __future__ import annotations

import functools
import os
import sqlite3
import stat
import subprocess
import sys
import time
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


def test_large_frames_are_read_by_blob_io_which_releases_the_gil(tmp_path) -> None:
    # issue 35 (loop stalls): a large frame fetched as a column is copied out of SQLite's pages with
    # the GIL held (~40 ms at 48 MiB, during which berth.aio's event loop cannot run); Blob.read
    # releases it. The mechanism is asserted, not a timing: the large frame comes through one blob
    # read, in a read transaction of its own, and a small one as a column, as before.
    from berth.backends import sqlite as module

    backend = SqliteBackend(str(tmp_path / "b.db"))
    big = os.urandom(module._BLOB_IO) + b"tail"
    small = b"s" * (module._BLOB_IO - 1)
    big_token, small_token = backend.put("i/big", big), backend.put("i/small", small)
    conn = backend._conn()
    opened: list[tuple[object, ...]] = []

    class Spy:  # the thread's connection, recording the blobs it opens
        def blobopen(self, *args, **kwargs):
            opened.append((*args, kwargs))
            return conn.blobopen(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(conn, name)

    backend._local.conn = Spy()
    try:
        assert backend.get("i/small") == (small, small_token)
        assert opened == []
        found = backend.get("i/big")
        assert found == (big, big_token) and type(found[0]) is bytes
        assert len(opened) == 1 and opened[0][:2] == ("berth_frames", "data") and opened[0][3] == {"readonly": True}
        assert not conn.in_transaction
        conn.execute("BEGIN")  # inside a caller's transaction: read in its snapshot, which stays open
        assert backend.get("i/big") == (big, big_token)
        assert conn.in_transaction
        conn.execute("COMMIT")
    finally:
        backend._local.conn = conn
    conn.execute("UPDATE berth_frames SET data = ? WHERE name = 'i/big'", ("t" * module._BLOB_IO,))
    with pytest.raises(berth.FormatError, match="a text value"):
        backend.get("i/big")
    assert backend.get("i/none") is None
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


# --- issue 15.3: the turn is a queue (the kernel's flock queue, waited for in a helper thread) ---

_TURN_CHILD = """
import os, sys, threading, time
from berth.backends.sqlite import SqliteBackend

db, marker, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
backend = SqliteBackend(db)
clashes = []

def run():
    for _ in range(turns):
        with backend._turn():
            try:
                os.mkdir(marker)  # exists only while some writer holds the turn
            except FileExistsError:
                clashes.append(1)
                continue
            time.sleep(0.0003)
            os.rmdir(marker)

threads = [threading.Thread(target=run) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(clashes), flush=True)
"""

_HOLD_CHILD = """
import sys, time
from berth.backends.sqlite import SqliteBackend

backend = SqliteBackend(sys.argv[1])
if sys.argv[2] == "hold":
    with backend._turn():
        print("held", flush=True)
        time.sleep(600)
backend.put("i/child", b"frame")  # waits in the queue
print("wrote", flush=True)
time.sleep(600)
"""


def _turn_holders(lock) -> int:
    """How many descriptors can take the turn at once right now (0 if someone holds it)."""
    import fcntl

    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return 1
    except BlockingIOError:
        return 0
    finally:
        os.close(fd)


def test_turns_across_processes_and_threads_never_overlap_and_none_is_lost(tmp_path) -> None:
    import subprocess
    import sys

    db, marker = str(tmp_path / "b.db"), str(tmp_path / "held")
    SqliteBackend(db).close()
    children = [
        subprocess.Popen([sys.executable, "-c", _TURN_CHILD, db, marker, "60"], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [child.communicate(timeout=120)[0] for child in children]
    assert [child.returncode for child in children] == [0, 0, 0]
    assert [out.strip() for out in outs] == ["0", "0", "0"], "two writers held the turn at once"
    assert not os.path.exists(marker)
    assert _turn_holders(tmp_path / "b.db-lock") == 1  # nobody kept it


def test_waiters_get_the_turn_in_the_order_they_asked(tmp_path) -> None:
    import fcntl
    import threading
    import time

    backend = SqliteBackend(str(tmp_path / "b.db"))
    holder = os.open(tmp_path / "b.db-lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    order: list[int] = []

    def write(i: int) -> None:
        with backend._turn():
            order.append(i)

    threads = []
    for i in range(5):
        threads.append(threading.Thread(target=write, args=(i,)))
        threads[-1].start()
        time.sleep(0.1)  # each is queued before the next asks
    assert order == []
    fcntl.flock(holder, fcntl.LOCK_UN)
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4]
    os.close(holder)
    backend.close()


def test_a_holder_or_a_waiter_killed_with_sigkill_does_not_wedge_the_queue(tmp_path) -> None:
    import signal
    import subprocess
    import sys
    import threading
    import time

    db = str(tmp_path / "b.db")
    SqliteBackend(db).close()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_CHILD, db, "hold"], stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen([sys.executable, "-c", _HOLD_CHILD, db, "wait"], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)  # started and queued behind the holder
        backend = SqliteBackend(db)  # busy_timeout 30 s: only the queue can let these through in time
        done: list[float] = []
        writers = [
            threading.Thread(target=lambda i=i: (backend.put(f"i/k{i}", b"frame"), done.append(time.monotonic())))
            for i in range(3)
        ]
        for w in writers:
            w.start()
        time.sleep(0.3)
        assert not done, "a write went ahead during another writer's turn"
        waiter.send_signal(signal.SIGKILL)  # dies in the queue
        waiter.wait(10)
        time.sleep(0.2)
        assert not done
        killed = time.monotonic()
        holder.send_signal(signal.SIGKILL)  # dies holding the turn
        holder.wait(10)
        for w in writers:
            w.join(10)
        assert len(done) == 3 and max(done) - killed < 5
        assert [backend.get(f"i/k{i}") is not None for i in range(3)] == [True, True, True]
        assert backend.get("i/child") is None  # the killed waiter never wrote
        backend.close()
    finally:
        for child in (holder, waiter):
            if child is not None:
                if child.poll() is None:
                    child.kill()
                child.wait(10)
                assert child.stdout is not None
                child.stdout.close()


def test_an_uncontended_turn_is_one_try_and_one_unlock_and_starts_no_thread(tmp_path, monkeypatch) -> None:
    import fcntl
    import threading

    from berth.backends import sqlite as module

    calls: list[int] = []

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(fcntl, name)

        def flock(self, fd: int, op: int) -> None:
            calls.append(op)
            fcntl.flock(fd, op)

    backend = SqliteBackend(str(tmp_path / "b.db"))
    backend.put("i/warm", b"x")
    monkeypatch.setattr(module, "fcntl", Counting())
    before = threading.active_count()
    token = backend.put("i/k", b"frame")
    backend.delete("i/k", token)
    nb = fcntl.LOCK_EX | fcntl.LOCK_NB
    assert calls == [nb, fcntl.LOCK_UN, nb, fcntl.LOCK_UN]
    assert threading.active_count() == before
    assert not any(t.name == "berth-sqlite-turn" for t in threading.enumerate())
    backend.close()


def test_a_timed_out_wait_leaves_no_turn_held_and_the_helper_ends_when_idle(tmp_path, monkeypatch) -> None:
    import fcntl
    import threading
    import time

    from berth.backends import sqlite as module

    monkeypatch.setattr(module, "_IDLE", 0.3)
    backend = SqliteBackend(str(tmp_path / "b.db"), busy_timeout=0.3)
    backend.put("i/warm", b"x")
    lock = tmp_path / "b.db-lock"
    holder = os.open(lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    backend.put("i/a", b"frame")  # 0.3 s in the queue, then SQLite decides (nobody holds SQLite's lock)
    fcntl.flock(holder, fcntl.LOCK_UN)  # the helper, still queued, takes the turn and gives it straight back
    deadline = time.monotonic() + 5
    while _turn_holders(lock) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _turn_holders(lock) == 1
    fcntl.flock(holder, fcntl.LOCK_EX)
    t0 = time.monotonic()
    writer = threading.Thread(target=lambda: backend.put("i/b", b"frame"))
    writer.start()
    time.sleep(0.1)
    fcntl.flock(holder, fcntl.LOCK_UN)  # the same helper hands this wait its turn at once
    writer.join(5)
    assert time.monotonic() - t0 < 0.3 and backend.get("i/b") is not None
    while any(t.name == "berth-sqlite-turn" for t in threading.enumerate()) and time.monotonic() < deadline + 5:
        time.sleep(0.05)
    assert not any(t.name == "berth-sqlite-turn" for t in threading.enumerate()), "the idle helper did not end"
    fcntl.flock(holder, fcntl.LOCK_EX)
    writer = threading.Thread(target=lambda: backend.put("i/c", b"frame"))
    writer.start()
    time.sleep(0.1)
    fcntl.flock(holder, fcntl.LOCK_UN)  # a new helper for this wait
    writer.join(5)
    assert backend.get("i/c") is not None
    os.close(holder)
    backend.close()


def test_closing_with_a_helper_still_queued_releases_everything(tmp_path) -> None:
    import fcntl
    import threading
    import time

    backend = SqliteBackend(str(tmp_path / "b.db"), busy_timeout=0.2)
    backend.put("i/warm", b"x")
    lock = tmp_path / "b.db-lock"
    holder = os.open(lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    backend.put("i/a", b"frame")  # timed out: its helper stays queued
    backend.close()
    fcntl.flock(holder, fcntl.LOCK_UN)
    deadline = time.monotonic() + 5
    while any(t.name == "berth-sqlite-turn" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name == "berth-sqlite-turn" for t in threading.enumerate())
    assert _turn_holders(lock) == 1
    os.close(holder)


class _BusyAtFirst(sqlite3.Connection):
    """A real connection whose first `busy` set-up statements fail as SQLite's immediate busy does."""

    busy = 0
    error = sqlite3.SQLITE_BUSY
    tries = 0

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        type(self).tries += 1
        if type(self).tries <= type(self).busy:
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = type(self).error
            raise exc
        return super().execute(sql, *args)  # type: ignore[arg-type]


def _busy_conn(tmp_path, busy: int, error: int = sqlite3.SQLITE_BUSY) -> sqlite3.Connection:
    _BusyAtFirst.busy, _BusyAtFirst.error, _BusyAtFirst.tries = busy, error, 0
    return sqlite3.connect(tmp_path / "raw.db", factory=_BusyAtFirst, isolation_level=None)


def test_set_up_retries_sqlites_immediate_busy_until_busy_timeout(tmp_path) -> None:
    # Several processes opening a new file at once: SQLite lets one switch it to WAL and answers
    # the others busy at once, without its busy handler (the benchmark's 8 writers hit it as
    # "database is locked" from open_store). Set-up statements are retried while busy.
    backend = SqliteBackend(tmp_path / "s.db", busy_timeout=0.3)
    conn = _busy_conn(tmp_path, busy=3)
    backend._until_not_busy(conn, "PRAGMA journal_mode=WAL")
    assert _BusyAtFirst.tries == 4
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()

    conn = _busy_conn(tmp_path, busy=10**9)  # busy for good: raised once busy_timeout has passed
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        backend._until_not_busy(conn, "PRAGMA journal_mode=WAL")
    assert 0.3 <= time.monotonic() - started < 3 and _BusyAtFirst.tries > 3
    conn.close()

    conn = _busy_conn(tmp_path, busy=1, error=sqlite3.SQLITE_CORRUPT)  # anything else: raised at once
    with pytest.raises(sqlite3.OperationalError):
        backend._until_not_busy(conn, "PRAGMA journal_mode=WAL")
    assert _BusyAtFirst.tries == 1
    conn.close()
    backend.close()


def test_many_processes_opening_a_new_store_at_once_all_open_it(tmp_path) -> None:
    script = """
import sys, time, warnings
warnings.simplefilter("ignore")
import berth, berth.testing
path, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    pass
store = berth.open_store(f"sqlite:///{path}", identity="t", sealer=berth.PlaintextSealer())
store.save(f"k{sys.argv[3]}", berth.testing.make_envelope())
print("ok")
"""
    for trial in range(3):
        path = tmp_path / f"new-{trial}.db"
        start = time.time() + 1.5
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(path), str(start), str(i)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(8)
        ]
        outs = [proc.communicate(timeout=60) for proc in procs]
        assert [(proc.returncode, out.strip()) for proc, (out, _err) in zip(procs, outs, strict=True)] == [
            (0, "ok")
        ] * 8, [err[-500:] for _out, err in outs if err]
        with sqlite3.connect(path) as check:
            assert check.execute("SELECT count(*) FROM berth_frames").fetchone()[0] == 8


# --- the URL: the common convention (SQLAlchemy's), three slashes relative, four absolute --------


def test_three_slashes_name_a_path_relative_to_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cases = [("sqlite:///./here.db", tmp_path / "here.db"), ("sqlite:///sub/rel.db", tmp_path / "sub/rel.db")]
    for url, where in cases:
        store = berth.open_store(url, identity="x", sealer=berth.PlaintextSealer())
        store.close()
        assert where.is_file(), url  # not /here.db, not /sub/rel.db


def test_four_slashes_and_localhost_name_an_absolute_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    for url in [f"sqlite:///{tmp_path}/elsewhere/a.db", f"sqlite://localhost{tmp_path}/elsewhere/b.db"]:
        assert SqliteBackend.from_url(url).path.parent == tmp_path / "elsewhere"
    assert f"sqlite:///{tmp_path}".startswith("sqlite:////")


def test_an_absolute_path_written_with_three_slashes_still_opens_with_a_deprecation(tmp_path, monkeypatch) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    old = f"sqlite://{tmp_path}/old.db"  # `tmp`'s first directory exists at the root, not in the working directory
    assert old.startswith("sqlite:///") and not old.startswith("sqlite:////")
    with pytest.warns(DeprecationWarning, match=r"write sqlite:////.*four slashes") as caught:
        berth.open_store(old, identity="x", sealer=berth.PlaintextSealer()).close()
    assert caught[0].filename == __file__  # pointed at the caller, not inside berth
    assert (tmp_path / "old.db").is_file() and not list(workdir.iterdir())


def test_a_url_with_a_host_or_no_file_is_refused_naming_both_forms(tmp_path) -> None:
    for url in ["sqlite://relative.db", "sqlite:///", "sqlite://"]:
        with pytest.raises(berth.BerthError, match=r"sqlite:////abs/file\.db.*sqlite:///relative\.db"):
            SqliteBackend.from_url(url)
