"""The async backend seam, and the adapter that runs a sync backend in worker threads.

`AsyncBackend` mirrors `berth.backends.Backend` method for method, awaited
(`heads` and `sorted_heads` are async iterators). Its optional calls have
defaults built on the required ones, as the sync base class's do.

`ThreadedBackend` serves every backend whose official client is blocking
(SQLite's `sqlite3`, the file system, google-cloud-storage, boto3) and any
third-party `Backend`: each call runs in one of a bounded pool of worker
threads, so the event loop never waits on a disk or a socket, and no more than
`max_threads` calls hold a thread (and, for SQLite, a connection) at once.
Listing pulls a page of rows per thread hop, not one row: the first page is
one row and each next one twice the last, up to 256, so the first row comes
at once and a consumer that acts on each row (a sweep deleting) does so while
the listing still reads.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, TypeVar

from berth._errors import BackendError, TokenMismatch
from berth._token import Token
from berth.backends import Backend, as_backend
from berth.backends._bulk import FRAME_BATCH, Data, Frame, Head, Put, names_before, sorted_names

__all__ = ["DEFAULT_MAX_THREADS", "AsyncBackend", "ThreadedBackend", "expire", "sync_twin"]

DEFAULT_MAX_THREADS = 8
_ROWS_PER_HOP = 256
T = TypeVar("T")
R = TypeVar("R", Head, Frame)


class AsyncBackend:
    """Where frames live, awaited: `put`, `get`, `delete`, `heads` required; the rest have defaults."""

    sync: Backend | None = None
    """Its sync twin over the same storage (every built-in one has one), or None."""

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new generation (conditionally if asked)."""
        raise NotImplementedError

    async def get(self, name: str) -> tuple[Data, Token] | None:
        """The data under `name` and its generation, or None."""
        raise NotImplementedError

    async def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        raise NotImplementedError

    async def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        """The first `size` bytes under `name` and its generation, or None. Default: `get`, cut."""
        found = await self.get(name)
        return None if found is None else (bytes(found[0][:size]), found[1])

    def heads(self, prefix: str, size: int) -> AsyncIterator[Head]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`, any order."""
        raise NotImplementedError

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> AsyncIterator[Head]:
        """Heads under `prefix` in bytewise name order; default: all heads, ordered in memory."""
        return self._sorted_by_heads(prefix, size, limit, reverse)

    async def _sorted_by_heads(self, prefix: str, size: int, limit: int | None, reverse: bool) -> AsyncIterator[Head]:
        rows = [row async for row in self.heads(prefix, size)]
        for row in sorted_names(rows, limit, reverse):
            yield row

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> AsyncIterator[Frame]:
        """Whole frames under `prefix` in bytewise name order; default: names from `sorted_heads`, then `get_many`."""
        return self._frames_by_heads(prefix, limit, reverse, before)

    async def _frames_by_heads(
        self, prefix: str, limit: int | None, reverse: bool, before: str | None
    ) -> AsyncIterator[Frame]:
        if before is None:
            names = [row[0] async for row in self.sorted_heads(prefix, 1, limit=limit, reverse=reverse)]
        else:
            listed = [row[0] async for row in self.sorted_heads(prefix, 1, limit=None, reverse=reverse)]
            names = list(names_before(listed, before, limit))
        for at in range(0, len(names), FRAME_BATCH):
            batch = names[at : at + FRAME_BATCH]
            for name, found in zip(batch, await self.get_many(batch), strict=True):
                if found is not None:
                    yield name, found[0], found[1]

    async def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        """`put` of each item (names distinct), in order: its token or its `TokenMismatch`, as
        `Backend.put_many`. Default: one `put` each, one after another."""
        out: list[Token | TokenMismatch] = []
        for item in items:
            try:
                out.append(await self.put(item.name, item.data, if_match=item.if_match, if_absent=item.if_absent))
            except TokenMismatch as exc:
                out.append(exc)
        return out

    async def get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        """Every name's data and generation (or None), in order; default: one `get` each, concurrently."""
        return list(await asyncio.gather(*(self.get(name) for name in names)))

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Delete each (name, token) still current; whether each was deleted. Default: one `delete` each."""
        out = []
        for name, token in items:
            try:
                await self.delete(name, token)
            except TokenMismatch:
                out.append(False)
            else:
                out.append(True)
        return out

    async def setup(self) -> None:
        """Create or migrate a schema; nothing by default."""

    async def aclose(self) -> None:
        """Release connections; nothing by default."""


class ThreadedBackend(AsyncBackend):
    """A sync `Backend` awaited: each call in one of at most `max_threads` worker threads."""

    sync: Backend

    def __init__(self, backend: Backend, *, max_threads: int = DEFAULT_MAX_THREADS):
        if not isinstance(max_threads, int) or max_threads < 1:
            raise ValueError(f"max_threads must be a positive int, got {max_threads!r}")
        self.sync = as_backend(backend)
        self.max_threads = max_threads
        self._pool = ThreadPoolExecutor(max_threads, thread_name_prefix="berth-aio")

    def __repr__(self) -> str:
        return f"ThreadedBackend({self.sync!r}, max_threads={self.max_threads})"

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        return await self._run(self.sync.put, name, data, if_match=if_match, if_absent=if_absent)

    async def get(self, name: str) -> tuple[Data, Token] | None:
        found: tuple[Data, Token] | None = await self._run(self.sync.get, name)
        return found

    async def delete(self, name: str, token: Token) -> None:
        await self._run(self.sync.delete, name, token)

    async def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        return await self._run(self.sync.head, name, size)

    async def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        return await self._run(self.sync.put_many, items)

    async def get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        return await self._run(self.sync.get_many, names)

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        return await self._run(self.sync.delete_many, items)

    def heads(self, prefix: str, size: int) -> AsyncIterator[Head]:
        return self._pages(lambda: self.sync.heads(prefix, size))

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> AsyncIterator[Head]:
        return self._pages(lambda: self.sync.sorted_heads(prefix, size, limit=limit, reverse=reverse))

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> AsyncIterator[Frame]:
        # A batch of whole frames per hop: the rows a consumer asked for are wanted together.
        bounded = {} if before is None else {"before": before}  # a backend of before this option works without it
        make = functools.partial(self.sync.sorted_frames, prefix, limit=limit, reverse=reverse, **bounded)
        return self._pages(make, FRAME_BATCH, FRAME_BATCH)

    async def _pages(
        self, make: Callable[[], Iterator[R]], want: int = 1, most: int = _ROWS_PER_HOP
    ) -> AsyncIterator[R]:
        # The sync iterator is made and advanced in worker threads, a page of rows per hop
        # (1, 2, 4, ... up to _ROWS_PER_HOP); nothing of it runs on the event loop.
        rows = await self._run(make)
        try:
            while True:
                page = await self._run(_take, rows, want)
                for row in page:
                    yield row
                if len(page) < want:
                    return
                want = min(want * 2, most)
        finally:
            if isinstance(rows, Generator):  # a generator holding a cursor or a directory: closed in a thread
                await self._run(rows.close)

    async def setup(self) -> None:
        await self._run(self.sync.setup)

    async def aclose(self) -> None:
        await self._run(self.sync.close)
        self._pool.shutdown(wait=False)

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` in this backend's worker threads (CPU work: sealing a large frame)."""
        return await self._run(fn, *args)


def _take(rows: Iterator[R], n: int) -> list[R]:
    return list(itertools.islice(rows, n))


def expire(waiter: asyncio.Future[Any]) -> None:
    """A pool waiter's timer: `TimeoutError` in the waiting task, unless it was served first."""
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def sync_twin(backend: AsyncBackend) -> Backend:
    """`backend.sync`, or for an async backend without one a `Backend` whose every call refuses."""
    return backend.sync if backend.sync is not None else _NoSyncTwin(backend)


class _NoSyncTwin(Backend):
    """The sync side of an async backend that has none: an `AsyncStore`'s `.sync` cannot do I/O through it."""

    def __init__(self, backend: AsyncBackend):
        self._backend = backend

    def _refuse(self) -> NoReturn:
        raise BackendError(f"{self._backend!r} has no sync twin: use the AsyncStore's awaited calls")

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        self._refuse()

    def get(self, name: str) -> tuple[Data, Token] | None:
        self._refuse()

    def delete(self, name: str, token: Token) -> None:
        self._refuse()

    def scan(self, prefix: str) -> Iterator[str]:
        self._refuse()
