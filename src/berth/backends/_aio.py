"""The async backend seam, and the adapter that runs a sync backend in worker threads.

`AsyncBackend` mirrors `Backend` method for method, awaited (`heads` and
`sorted_heads` are async iterators). Its optional calls have defaults built on
the required four, as the sync seam's do (`berth.backends._bulk`).

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
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from berth._errors import TokenMismatch
from berth._token import Token
from berth.backends._bulk import Head, delete_many, get_many, read_head, sorted_heads, sorted_names

__all__ = ["DEFAULT_MAX_THREADS", "AsyncBackend", "ThreadedBackend", "expire"]

DEFAULT_MAX_THREADS = 8
_ROWS_PER_HOP = 256
T = TypeVar("T")


class AsyncBackend:
    """Where frames live, awaited: `put`, `get`, `delete`, `heads` required; the rest have defaults."""

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new generation (conditionally if asked)."""
        raise NotImplementedError

    async def get(self, name: str) -> tuple[bytes, Token] | None:
        """The data under `name` and its generation, or None."""
        raise NotImplementedError

    async def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""
        raise NotImplementedError

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

    async def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes under `name` and its generation (a listing's long header); default: `get`."""
        found = await self.get(name)
        return None if found is None else (bytes(found[0][:size]), found[1])

    async def get_many(self, names: Sequence[str]) -> list[tuple[bytes, Token] | None]:
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

    def __init__(self, backend: Any, *, max_threads: int = DEFAULT_MAX_THREADS):
        if not isinstance(max_threads, int) or max_threads < 1:
            raise ValueError(f"max_threads must be a positive int, got {max_threads!r}")
        self.sync = backend
        self.max_threads = max_threads
        self._pool = ThreadPoolExecutor(max_threads, thread_name_prefix="berth-aio")

    def __repr__(self) -> str:
        return f"ThreadedBackend({self.sync!r}, max_threads={self.max_threads})"

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        return await self._run(self.sync.put, name, data, if_match=if_match, if_absent=if_absent)

    async def get(self, name: str) -> tuple[bytes, Token] | None:
        found: tuple[bytes, Token] | None = await self._run(self.sync.get, name)
        return found

    async def delete(self, name: str, token: Token) -> None:
        await self._run(self.sync.delete, name, token)

    async def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        return await self._run(read_head, self.sync, name, size)

    async def get_many(self, names: Sequence[str]) -> list[tuple[bytes, Token] | None]:
        return await self._run(get_many, self.sync, names)

    async def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        return await self._run(delete_many, self.sync, items)

    def heads(self, prefix: str, size: int) -> AsyncIterator[Head]:
        def rows() -> Iterator[Head]:
            own = getattr(self.sync, "heads", None)
            if own is not None:
                yield from own(prefix, size)
                return
            for name in self.sync.scan(prefix):
                found = self.sync.get(name)
                if found is not None:
                    yield name, bytes(found[0][:size]), found[1], len(found[0])

        return self._pages(rows)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> AsyncIterator[Head]:
        return self._pages(lambda: sorted_heads(self.sync, prefix, size, limit=limit, reverse=reverse))

    async def _pages(self, make: Callable[[], Iterator[Head]]) -> AsyncIterator[Head]:
        # The sync iterator is made and advanced in worker threads, a page of rows per hop
        # (1, 2, 4, ... up to _ROWS_PER_HOP); nothing of it runs on the event loop.
        rows = await self._run(make)
        want = 1
        try:
            while True:
                page = await self._run(_take, rows, want)
                for row in page:
                    yield row
                if len(page) < want:
                    return
                want = min(want * 2, _ROWS_PER_HOP)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                await self._run(close)

    async def setup(self) -> None:
        setup = getattr(self.sync, "setup", None)
        if setup is not None:
            await self._run(setup)

    async def aclose(self) -> None:
        close = getattr(self.sync, "close", None)
        if close is not None:
            await self._run(close)
        self._pool.shutdown(wait=False)

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` in this backend's worker threads (CPU work: sealing a large frame)."""
        return await self._run(fn, *args)


def _take(rows: Iterator[Head], n: int) -> list[Head]:
    return list(itertools.islice(rows, n))


def expire(waiter: asyncio.Future[Any]) -> None:
    """A pool waiter's timer: `TimeoutError` in the waiting task, unless it was served first."""
    if not waiter.done():
        waiter.set_exception(TimeoutError())
