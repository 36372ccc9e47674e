"""`sqlite:////abs/file.db` (`sqlite:///relative.db`): the embedded default; one row per frame, in WAL mode.

Every write draws a fresh random 62-bit generation, so a token loaded before a
re-save (or before a delete and re-create) never matches again, and a save is one
`INSERT OR REPLACE` touching only the row and its index (an AUTOINCREMENT counter
would add a page write to every commit). The claim is
`DELETE ... WHERE name = ? AND gen = ?`. Every statement is its own durable
transaction (synchronous=FULL); one connection per thread.

Writers take turns through a flock on `{file}-lock` beside the database (see
`_Turn`): uncontended one non-blocking try, contended a sleep in the kernel's
first-come-first-served queue of that lock, so that every writer gets its turn in
order and a waiting writer burns no CPU; reads take no turn (WAL readers never wait
for writers). docs/backends/sqlite.md says what a host can expect from many writers.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from berth._atomic import make_dirs
from berth._errors import BerthError, FormatError, StoreMissing, TokenMismatch, caller_level
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends import Backend, Put
from berth.backends._bulk import FRAME_BATCH, Frame, Head, bound
from berth.backends._errmap import ErrorMap, Row
from berth.backends._url import own_options

__all__ = ["SqliteBackend"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS berth_frames (
    name TEXT PRIMARY KEY,
    gen  INTEGER NOT NULL,
    data BLOB NOT NULL
)
"""
_PAGE = 256
_BLOB_IO = LARGE_FRAME  # frames from this size are written into a zeroblob piece by piece (see _write_large)
_BLOB_PIECE = 1 << 20
# A frame of _BLOB_IO bytes or more comes back NULL (length() reads no overflow page): read by blob I/O.
_GET = f"SELECT CASE WHEN length(data) < {_BLOB_IO} THEN data END, gen FROM berth_frames WHERE name = ?"  # noqa: S608


_ERRORS = ErrorMap("sqlite", [Row(sqlite3.Error)])
_URL_OPTIONS = {"synchronous": str, "busy_timeout": float}  # the query parameters a sqlite:// URL takes


def _frame(row: tuple[Any, ...]) -> Frame:
    """`(name, data, token)` of one row of `sorted_frames`, refusing a row another writer put there."""
    name, data, gen = row
    if type(data) is not bytes or type(gen) is not int:
        raise FormatError(f"sqlite row for {name!r} is not a berth frame (a {type(data).__name__} value)")
    return name, data, Token(gen)


try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writers wait in SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

_IDLE = 10.0  # seconds a turn's waiting thread stays without a wait before it ends (the next wait starts one)


class _Turn:
    """`with`: this thread's turn to write, an exclusive flock on the store's `-lock` file.

    Uncontended, a turn is one `LOCK_NB` try and one unlock. Contended, the writer waits in
    the kernel's own queue of that flock: Linux (since 4.19) files each blocked request
    beneath the one it conflicts with and wakes one waiter per release, in the order they
    blocked, so every waiter sleeps on exactly one predecessor and no release wakes a herd.
    A blocking flock cannot time out, so the blocking call runs in a helper thread (one per
    turn, started at its first contended wait, ended after `_IDLE` seconds without one) while
    the writer waits for it with `busy_timeout`. A writer that asks at the instant of a
    release can take the turn before the woken head of the queue runs (it then stays at the
    head): that keeps the file busy on a crowded machine, and waiting writers still get
    near-equal shares. The polling this replaced (a `LOCK_NB` try every 0.25-0.75 ms) cost
    ~35 µs of CPU per try and left the file idle until a try: with 8 writers in the same
    runs it made 0.64× the raw client's cycles/s at 1.6 ms of CPU per cycle, this queue
    0.85× at 1.2 ms. The helper's round trip (~60 µs of CPU, ~70 µs until the writer runs)
    is the queue's own cost: with 2-4 writers, whose waits are short, it about cancels the
    gain (benchmarks/notes.md, *Writers on one SQLite file*).

    The turn is only a queue: SQLite's own locking still decides, so a writer that does not
    take turns (another program, an older berth) is safe, and one that has waited
    `busy_timeout` for its turn goes on to SQLite's busy handler (its helper, still in the
    queue, gives the turn straight back when it comes). A process that dies, holding or
    waiting, leaves the queue with its file descriptors.
    """

    __slots__ = ("fd", "timeout", "_helper")

    def __init__(self, fd: int, timeout: float):
        self.fd, self.timeout = fd, timeout
        self._helper: _Helper | None = None

    def __enter__(self) -> None:
        helper = self._helper
        if helper is None or not helper.busy:  # a helper still queued from a timed-out wait is this fd's request
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
        while True:
            if helper is None:
                try:
                    helper = self._helper = _Helper(self.fd)
                except (OSError, RuntimeError):  # no descriptor or thread to spare: SQLite's busy handler decides
                    return
            if helper.wait(self.timeout) is not None:
                return  # the turn, or none after busy_timeout: SQLite's busy handler decides (the unlock is harmless)
            helper = None  # it ended (idle, or it is a parent's from before a fork): start another

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._helper is not None:
            self._helper.close()
        os.close(self.fd)


class _Helper:
    """A thread that waits in the flock queue for one `_Turn`, so that its writer's wait can time out."""

    __slots__ = ("fd", "pid", "busy", "wanted", "granted", "gone", "_go", "_done", "_mutex")

    def __init__(self, fd: int):
        # A duplicate shares the open file description, so the lock it takes is the turn's own
        # (released by the writer's unlock); the helper owns and closes it, so it never locks a
        # descriptor number that was closed and reused.
        self.fd = os.dup(fd)
        self.pid = os.getpid()
        self.busy = self.wanted = self.granted = self.gone = False
        self._go, self._done, self._mutex = threading.Lock(), threading.Lock(), threading.Lock()
        self._go.acquire()
        self._done.acquire()
        try:
            threading.Thread(target=self._run, name="berth-sqlite-turn", daemon=True).start()
        except BaseException:
            os.close(self.fd)
            raise

    def wait(self, timeout: float) -> bool | None:
        """True: the turn is held; False: `timeout` passed without it; None: this helper has ended."""
        if self.pid != os.getpid():
            return None  # forked: the thread is the parent's, and its locks may be held there
        with self._mutex:
            if self.gone:
                return None
            self.wanted = True
            if not self.busy:
                self.busy = True
                self._go.release()
        if self._done.acquire(timeout=timeout):
            return self.granted
        with self._mutex:
            if self._done.acquire(blocking=False):  # granted as the wait ran out
                return self.granted
            self.wanted = False
        return False

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        with self._mutex:
            self.gone, self.wanted = True, False
            if not self.busy:
                self._go.release()

    def _run(self) -> None:
        try:
            while True:
                if not self._go.acquire(timeout=_IDLE):
                    with self._mutex:
                        if not self.busy:
                            self.gone = True
                            return
                    continue  # a wait began as the idle time ran out: `go` is released
                if self.gone:
                    return
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX)
                    ok = True
                except OSError:
                    ok = False
                with self._mutex:
                    self.busy = False
                    if self.wanted:
                        self.wanted, self.granted = False, ok
                        self._done.release()
                    elif ok:
                        fcntl.flock(self.fd, fcntl.LOCK_UN)  # its writer went on without it
                    if self.gone:
                        return
        finally:
            os.close(self.fd)


class _NoTurn:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_TURN = _NoTurn()


def url_path(url: str) -> Path:
    """The database a `sqlite://` URL names, by the common convention (SQLAlchemy's).

    `sqlite:////abs/file.db` (four slashes) and `sqlite://localhost/abs/file.db` name an absolute
    path; `sqlite:///relative.db` (three) a path relative to the working directory. Until 0.2 an
    absolute path written the old way, with three slashes, still opens where that is unambiguous:
    when the path's first directory exists at the root and not in the working directory
    (`sqlite:///var/lib/app/berth.db` run from a directory without `var/`), with a DeprecationWarning.
    """
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise BerthError(
            f"sqlite:// URL {url!r} names host {parts.netloc!r}: "
            "use sqlite:////abs/file.db (absolute) or sqlite:///relative.db"
        )
    path = unquote(parts.path)
    if parts.netloc == "localhost" or path.startswith("//"):
        return Path(path[1:] if path.startswith("//") else path)
    relative = path[1:]
    if not relative:
        raise BerthError(f"sqlite:// URL {url!r} names no file: use sqlite:////abs/file.db or sqlite:///relative.db")
    first = relative.split("/", 1)[0]
    if first not in (".", "..") and not (Path.cwd() / first).exists() and (Path("/") / first).exists():
        warnings.warn(
            f"sqlite:///{relative} opens /{relative} as before; write sqlite:////{relative} (four slashes): "
            "three slashes name a path relative to the working directory, and from berth 0.2 always will",
            DeprecationWarning,
            stacklevel=caller_level(),
        )
        return Path("/") / relative
    return Path.cwd() / relative


class SqliteBackend(Backend):
    """Frames as rows of one SQLite table, safe across threads and processes."""

    creates = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        create: bool = True,
    ):
        self.path = Path(path)
        if not self.path.is_absolute():
            raise BerthError(f"sqlite:// needs an absolute path, got {str(path)!r}")
        if synchronous.upper() not in ("FULL", "EXTRA", "NORMAL"):
            raise BerthError(f"sqlite synchronous must be FULL, EXTRA or NORMAL, got {synchronous!r}")
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous.upper()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._turns: list[_Turn] = []
        self._lock = threading.Lock()
        if not create:  # open what exists; create nothing (no directory, file or table)
            if not self.path.is_file():
                raise StoreMissing(f"sqlite database {str(self.path)!r} does not exist (`berth setup` creates it)")
            # read-only: a file that is not a store is left exactly as it was
            uri = f"{self.path.as_uri()}?mode=ro"
            try:
                with closing(sqlite3.connect(uri, uri=True, timeout=busy_timeout)) as peek:
                    found = peek.execute("SELECT 1 FROM sqlite_master WHERE name = 'berth_frames'").fetchone()
            except _ERRORS.catches as exc:
                raise _ERRORS.error(exc, "open", str(self.path)) from exc
            if found is None:
                raise StoreMissing(f"sqlite database {str(self.path)!r} holds no berth store (`berth setup` makes one)")
            return
        self._create_file()
        try:
            self._until_not_busy(self._conn(), _SCHEMA)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "set up", str(self.path)) from exc

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteBackend:
        """Open `sqlite:////abs/file.db`, with `synchronous` and `busy_timeout` from the query or
        keywords (a keyword wins); any other query parameter is refused, before any I/O."""
        rest = urlsplit(own_options(url, _URL_OPTIONS, options, "sqlite")).query
        if rest:
            raise BerthError(f"sqlite URL query takes only {', '.join(_URL_OPTIONS)}, got {rest!r}")
        return cls(url_path(url), **options)

    def _create_file(self) -> None:
        try:
            make_dirs(self.path.parent)  # missing parents 0700, whatever the umask
        except OSError as exc:
            raise _ERRORS.error(exc, "create the directory of", str(self.path)) from exc
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return
        except OSError as exc:
            raise _ERRORS.error(exc, "create", str(self.path)) from exc
        os.fchmod(fd, 0o600)
        os.close(fd)

    def _until_not_busy(self, conn: sqlite3.Connection, statement: str) -> None:
        """Run a set-up statement, retrying while SQLite answers busy without waiting, up to `busy_timeout`.

        Several processes opening a new file at once each switch it to WAL (or create the table)
        from a read lock; SQLite refuses all but one at once, without calling its busy handler
        (waiting could deadlock two readers that both want to write), so `database is locked`
        would reach a host that only opened a store. The switch and the table are made once per
        file: retrying them is safe, and costs nothing once the file is set up.
        """
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                conn.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.001 + 0.004 * secrets.randbelow(1000) / 1000)  # jittered: the others retry too

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False)
            try:
                self._until_not_busy(conn, "PRAGMA journal_mode=WAL")
            except BaseException:
                conn.close()
                raise
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            # A deleted frame's bytes are zeroed, not left in free pages (or a plaintext frame would
            # outlive its migration to a sealer).
            conn.execute("PRAGMA secure_delete=ON")
            self._local.conn = conn
            self._local.cursor = conn.cursor()
            self._local.turn = self._open_turn()
            with self._lock:
                self._all.append(conn)
        return conn

    def _open_turn(self) -> _Turn | _NoTurn:
        if fcntl is None:
            return _NO_TURN
        try:
            fd = os.open(f"{self.path}-lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:  # a read-only directory, say: SQLite's own locking still serializes writers
            return _NO_TURN
        turn = _Turn(fd, self._busy_timeout)
        with self._lock:
            self._turns.append(turn)
        return turn

    def _turn(self) -> _Turn | _NoTurn:
        turn: _Turn | _NoTurn | None = getattr(self._local, "turn", None)
        if turn is None:
            self._conn()
            turn = self._local.turn
        return turn

    def _cursor(self) -> sqlite3.Cursor:
        """This thread's kept cursor for single-row statements (a cursor per call costs ~1 µs more)."""
        cur: sqlite3.Cursor | None = getattr(self._local, "cursor", None)
        if cur is None:
            self._conn()
            cur = self._local.cursor
        return cur

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        if len(data) >= _BLOB_IO:  # in a transaction of its own (see _write_large)
            done = self.put_many([Put(name, data, if_match, if_absent)])[0]
            if isinstance(done, TokenMismatch):
                raise done
            return done
        try:  # the hot paths map errors in a plain `except`: no context-manager object per call
            with self._turn():
                return self._write(self._cursor(), name, data, if_match, if_absent)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "save", name) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        """`with`: this thread's kept cursor in a write transaction (BEGIN IMMEDIATE), committed at the
        end of the block, rolled back if the block or the commit raises; in this thread's turn."""
        conn = self._conn()
        cur = self._cursor()
        with self._turn():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                conn.execute("COMMIT")  # inside: a failed commit must not leave the transaction open
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        """Every item in one transaction (one commit, one fsync); a failed condition is that item's outcome."""
        out: list[Token | TokenMismatch] = []
        if not items:
            return out
        try:
            with self._transaction() as cur:
                for name, data, if_match, if_absent in items:
                    try:
                        out.append(self._write(cur, name, data, if_match, if_absent))
                    except TokenMismatch as exc:
                        out.append(exc)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "save", items[0].name) from exc
        return out

    def _write(self, cur: sqlite3.Cursor, name: str, data: bytes, if_match: Token | None, if_absent: bool) -> Token:
        """One put's statement on this thread's cursor, its own transaction or part of the caller's."""
        if if_absent and if_match is not None:  # nothing can be absent and at a generation
            raise TokenMismatch(f"{name!r} cannot be both absent and at generation {if_match.value!r}")
        if if_match is not None and not isinstance(if_match.value, int):
            raise TokenMismatch(f"{name!r} changed since it was read")
        gen = secrets.randbits(62) + 1
        if len(data) >= _BLOB_IO:
            self._write_large(cur, name, data, gen, if_match, if_absent)
        elif if_match is not None:
            cur.execute(
                "UPDATE berth_frames SET gen = ?, data = ? WHERE name = ? AND gen = ?",
                (gen, data, name, if_match.value),
            )
            if cur.rowcount != 1:
                raise TokenMismatch(f"{name!r} changed since it was read")
        elif if_absent:
            cur.execute("INSERT OR IGNORE INTO berth_frames(name, gen, data) VALUES (?, ?, ?)", (name, gen, data))
            if cur.rowcount != 1:
                raise TokenMismatch(f"{name!r} already exists")
        else:
            cur.execute("INSERT OR REPLACE INTO berth_frames(name, gen, data) VALUES (?, ?, ?)", (name, gen, data))
        return Token(gen)

    def _write_large(
        self, cur: sqlite3.Cursor, name: str, data: bytes | bytearray, gen: int, if_match: Token | None, if_absent: bool
    ) -> None:
        """A large frame's row in the caller's transaction: a zeroblob of its size, then the bytes by blob I/O.

        Bound as a parameter, a frame is copied by the sqlite3 module and again into SQLite's
        record: a 64 MiB save peaked at 3× the state. Written in pieces into the row's blob,
        only the caller's frame and SQLite's page cache are held.
        """
        if if_match is not None:
            cur.execute(
                "UPDATE berth_frames SET gen = ?, data = zeroblob(?) WHERE name = ? AND gen = ?",
                (gen, len(data), name, if_match.value),
            )
            if cur.rowcount != 1:
                raise TokenMismatch(f"{name!r} changed since it was read")
            rowid = cur.execute("SELECT rowid FROM berth_frames WHERE name = ?", (name,)).fetchall()[0][0]
        else:
            verb = "INSERT OR IGNORE" if if_absent else "INSERT OR REPLACE"
            cur.execute(f"{verb} INTO berth_frames(name, gen, data) VALUES (?, ?, zeroblob(?))", (name, gen, len(data)))
            if cur.rowcount != 1:
                raise TokenMismatch(f"{name!r} already exists")
            rowid = cur.lastrowid
        view = memoryview(data)
        with self._conn().blobopen("berth_frames", "data", rowid) as blob:
            for at in range(0, len(view), _BLOB_PIECE):
                blob.write(view[at : at + _BLOB_PIECE])

    def get(self, name: str) -> tuple[bytes, Token] | None:
        try:
            # fetchall: the kept cursor's statement is stepped to its end and reset, so no read
            # transaction stays open between calls. A large frame comes back NULL: _read_large.
            rows = self._cursor().execute(_GET, (name,)).fetchall()
            if rows and rows[0][0] is None:
                return self._read_large(name)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "load", name) from exc
        if not rows:
            return None
        data, gen = rows[0]
        if type(data) is not bytes or type(gen) is not int:
            raise FormatError(f"sqlite row for {name!r} is not a berth frame (a {type(data).__name__} value)")
        return data, Token(gen)

    def _read_large(self, name: str) -> tuple[bytes, Token] | None:
        """A large frame and its generation, read in one snapshot by blob I/O.

        Fetched as a column, the frame is copied out of SQLite's pages with the GIL held (~40 ms
        at 48 MiB: every thread of the process, and an event loop, waits that long); `Blob.read`
        releases the GIL while SQLite reads, so only the buffer's allocation holds it.
        """
        conn = self._conn()
        own = not conn.in_transaction  # else: already in the caller's snapshot
        if own:
            conn.execute("BEGIN")
        try:
            rows = conn.execute("SELECT rowid, gen, typeof(data) FROM berth_frames WHERE name = ?", (name,)).fetchall()
            if not rows:
                return None  # deleted since the first read
            rowid, gen, kind = rows[0]
            if kind != "blob" or type(gen) is not int:
                raise FormatError(f"sqlite row for {name!r} is not a berth frame (a {kind} value)")
            with conn.blobopen("berth_frames", "data", rowid, readonly=True) as blob:
                data = blob.read()
        finally:
            if own:
                conn.execute("COMMIT")
        return data, Token(gen)

    def delete(self, name: str, token: Token) -> None:
        if not isinstance(token.value, int):
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
        try:
            with self._turn():
                cur = self._cursor().execute("DELETE FROM berth_frames WHERE name = ? AND gen = ?", (name, token.value))
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "delete", name) from exc
        if cur.rowcount != 1:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")

    def _pages(
        self,
        prefix: str,
        columns: str,
        *args: Any,
        limit: int | None = None,
        reverse: bool = False,
        rows_per_page: int = _PAGE,
        before: str | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        # Keyset pages in name order over the primary key's index: no read transaction
        # stays open between pages, so a long listing never blocks writers or checkpoints,
        # and `limit` rows newest-first (`reverse`) are one bounded query.
        last: str | None = None
        remaining = limit
        while remaining is None or remaining > 0:
            page = rows_per_page if remaining is None else min(rows_per_page, remaining)
            rows = self._page(prefix, columns, args, page, reverse, last, before)
            yield from rows
            if len(rows) < page:
                return
            if remaining is not None:
                remaining -= len(rows)
            last = rows[-1][0]

    def _page(
        self,
        prefix: str,
        columns: str,
        args: tuple[Any, ...],
        page: int,
        reverse: bool,
        last: str | None,
        before: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """One keyset page of `_pages`: up to `page` rows under `prefix` past `last` (and before `before`)."""
        below = bound(prefix, before)
        if reverse:
            where, params = "name >= ?", [prefix]
            if last is not None or below is not None:
                where += " AND name < ?"
                params.append(last if last is not None else below)  # type: ignore[arg-type]
        else:
            where, params = ("name > ?", [last]) if last is not None else ("name >= ?", [prefix])
            if below is not None:
                where += " AND name < ?"
                params.append(below)
        order = "DESC" if reverse else "ASC"
        sql = f"SELECT name, {columns} FROM berth_frames WHERE {where} ORDER BY name {order} LIMIT {page}"
        try:
            rows: list[tuple[Any, ...]] = self._conn().execute(sql, (*args, *params)).fetchall()
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "list", prefix) from exc
        return rows

    def scan(self, prefix: str) -> Iterator[str]:
        for row in self._pages(prefix, "1"):
            yield row[0]

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`."""
        return self.sorted_heads(prefix, size, limit=None, reverse=False)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order; `limit=1, reverse=True` is one indexed query."""
        rows = self._pages(prefix, "substr(data, 1, ?), gen, length(data)", size, limit=limit, reverse=reverse)
        for name, head, gen, full in rows:
            if type(head) is not bytes or type(gen) is not int:  # a row another writer put there
                yield name, FormatError(f"sqlite row for {name!r} is not a berth frame"), Token.ZERO, 0
                continue
            yield name, head, Token(gen), full

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> Iterator[Frame]:
        """Whole frames under `prefix` in name order: `limit` of them (up to 64) is one indexed query."""
        if limit is not None and 0 < limit <= FRAME_BATCH:
            # one page: read it now, no pager generator (a third of the SQL's cost for a saver's two rows)
            return iter([_frame(row) for row in self._page(prefix, "data, gen", (), limit, reverse, None, before)])
        rows = self._pages(prefix, "data, gen", limit=limit, reverse=reverse, rows_per_page=FRAME_BATCH, before=before)
        return map(_frame, rows)

    def get_many(self, names: Sequence[str]) -> list[tuple[bytes, Token] | None]:
        """Every name's data and generation (or None): one query per 256 names, in one read snapshot.

        Up to 256 names is one statement, a snapshot of its own: no BEGIN/COMMIT around it
        (those two statements were a third of a LangGraph `get_tuple`'s batched load).
        """
        found: dict[str, tuple[bytes, Token]] = {}
        unique = list(dict.fromkeys(names))
        conn = self._conn()
        one = len(unique) <= _PAGE
        try:
            if not one:
                conn.execute("BEGIN")
            try:
                for i in range(0, len(unique), _PAGE):
                    chunk = unique[i : i + _PAGE]
                    marks = ",".join("?" * len(chunk))
                    for name, data, gen in conn.execute(
                        f"SELECT name, data, gen FROM berth_frames WHERE name IN ({marks})", chunk
                    ).fetchall():
                        if type(data) is not bytes or type(gen) is not int:
                            raise FormatError(f"sqlite row for {name!r} is not a berth frame")
                        found[name] = (data, Token(gen))
            finally:
                if not one:
                    conn.execute("COMMIT")
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "load", unique[0] if unique else "*") from exc
        return [found.get(name) for name in names]

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Delete each name still at its token, all in one transaction (one commit, one fsync)."""
        out = []
        try:
            with self._transaction() as cur:
                for name, token in items:
                    if not isinstance(token.value, int):
                        out.append(False)
                        continue
                    cur.execute("DELETE FROM berth_frames WHERE name = ? AND gen = ?", (name, token.value))
                    out.append(cur.rowcount == 1)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "delete", items[0][0] if items else "*") from exc
        return out

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its token."""
        try:
            rows = (
                self._cursor()
                .execute("SELECT substr(data, 1, ?), gen FROM berth_frames WHERE name = ?", (size, name))
                .fetchall()
            )
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "list", name) from exc
        if not rows:
            return None
        head, gen = rows[0]
        if type(head) is not bytes or type(gen) is not int:
            raise FormatError(f"sqlite row for {name!r} is not a berth frame")
        return head, Token(gen)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
            turns, self._turns = self._turns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        for turn in turns:
            turn.close()
        self._local = threading.local()
