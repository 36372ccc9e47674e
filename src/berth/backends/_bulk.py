"""The types a backend reads back (`Data`, `Head`) and the helpers of ordered listing.

Order is bytewise UTF-8 of the name. Python compares `str` by code point, which
is the same order (UTF-8 preserves code point order), and so do SQLite's BINARY
collation and PostgreSQL's `COLLATE "C"` on a UTF8 database.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import marshal
import tempfile
from collections.abc import Generator, Iterable, Iterator
from itertools import islice
from typing import Any, NamedTuple, TypeVar

from berth._errors import FormatError, IntegrityError
from berth._token import Token

__all__ = [
    "FRAME_BATCH",
    "Data",
    "Frame",
    "Head",
    "Ordering",
    "Put",
    "bound",
    "names_before",
    "ordered",
    "sorted_names",
    "upper_bound",
]

Data = bytes | memoryview
"""What a backend reads back: bytes, or (a large frame) a view of the buffer it was read into,
where a copy would cost one more pass over the whole frame."""

Head = tuple[str, Data | FormatError | IntegrityError, Token, int]
"""(name, the first bytes of the stored data, its token, the data's full size).

In place of the bytes, a backend may give the `FormatError`/`IntegrityError` that reading one
entry raised: a listing yields it flagged and goes on."""

Frame = tuple[str, Data, Token]
"""(name, the whole stored data, its token): one row of an ordered load (`sorted_frames`)."""


class Put(NamedTuple):
    """One write of `Backend.put_many`: what `put(name, data, if_match=..., if_absent=...)` takes."""

    name: str
    data: bytes
    if_match: Token | None = None
    if_absent: bool = False


FRAME_BATCH = 64
"""Frames per read of an ordered load (`sorted_frames`): the most one batch holds in memory."""

_T = TypeVar("_T", str, tuple[str, str], tuple[str, Any], Head)


@functools.lru_cache(maxsize=1024)  # a listing's prefix comes up again and again (a thread's checkpoints)
def upper_bound(prefix: str) -> str | None:
    """The least string greater than every string starting with `prefix` (code point order), or None."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code < 0x10FFFF:
            code += 1
            if 0xD800 <= code <= 0xDFFF:
                code = 0xE000
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def bound(prefix: str, before: str | None) -> str | None:
    """The least string no listing of `prefix` limited to names before `before` reaches (None: no bound)."""
    below = upper_bound(prefix)
    if before is not None and (below is None or before < below):
        return before
    return below


def names_before(names: Iterable[str], before: str | None, limit: int | None) -> Iterator[str]:
    """`names`, already in order, that sort before `before` (all when None): the first `limit` of them."""
    kept = names if before is None else (name for name in names if name < before)
    return islice(kept, limit)


def sorted_names(names: Iterable[_T], limit: int | None, reverse: bool) -> list[_T]:
    """`names` (or tuples that start with the name) in bytewise order (descending with
    `reverse`), the first `limit` only.

    With a limit, memory is O(limit) however many names come by (a heap), not O(names).
    """
    if limit is None:
        return sorted(names, reverse=reverse)
    return heapq.nlargest(limit, names) if reverse else heapq.nsmallest(limit, names)


_SORT_MEMORY = 16384  # names held at once by `ordered`; past it, the rest is sorted in spilled buckets
_BUCKETS = 64
_FLUSH = 128  # names a bucket buffers before they are spilled (64 buckets: at most 8,192 buffered)
_DEPTH = 3  # a bucket still over the limit is split again, this many levels at most


def ordered(
    names: Iterable[str], *, reverse: bool = False, memory: int | None = None, directory: str | None = None
) -> Generator[str, None, None]:
    """`names` in order (descending with `reverse`), each once, in bounded memory however many come by.

    Up to `memory` names (default 16,384) are sorted in memory. Past that, a sample sort: the first
    `memory` names, sorted, give the bounds of 64 buckets; every name is routed to its
    bucket (`bisect`), and buckets are spilled to an anonymous temporary file in
    `directory` (the system's default: None) in chunks of 128, then read back and
    sorted one at a time, in order. A bucket over `memory` is split the same way (three
    levels at most), so memory stays O(memory) for any realistic count (a million
    names: buckets of ~16,000). The temporary file has no name: it is gone when the
    iteration ends or the process dies.
    """
    with Ordering(reverse=reverse, memory=memory, directory=directory) as ordering:
        ordering.add(names)
        yield from ordering


class Ordering:
    """`ordered` fed in batches (`add`), then iterated once: for a caller whose names arrive
    asynchronously. A `with` block (or `close`) removes the spill file of an ordering left unfinished."""

    def __init__(
        self, *, reverse: bool = False, memory: int | None = None, directory: str | None = None, depth: int = 0
    ):
        self.reverse = reverse
        self._memory = memory or _SORT_MEMORY
        self._directory = directory
        self._depth = depth
        self._first: list[str] = []
        self._spill: Any = None
        self._bounds: list[str] = []
        self._buffers: list[list[str]] = []
        self._chunks: list[list[int]] = []

    @property
    def spilled(self) -> bool:
        """Whether the names went past `memory` (iterating then reads buckets back from the file)."""
        return self._spill is not None

    def spills(self, more: int) -> bool:
        """Whether adding `more` names goes past `memory` (sorting and writing the file: milliseconds of CPU)."""
        return self._spill is not None or len(self._first) + more >= self._memory

    def add(self, names: Iterable[str]) -> None:
        """Take more names (any order, repeats allowed)."""
        it = iter(names)
        if self._spill is None:
            self._first.extend(islice(it, self._memory - len(self._first)))
            if len(self._first) < self._memory or self._depth >= _DEPTH:
                self._first.extend(it)  # below the limit it is empty; at the last level, in memory
                return
            self._start_spill()
        self._route(it)

    def _start_spill(self) -> None:
        first, self._first = sorted(self._first), []
        step = len(first) // _BUCKETS
        self._bounds = sorted({first[i * step] for i in range(1, _BUCKETS)})
        self._buffers = [[] for _ in range(len(self._bounds) + 1)]
        self._chunks = [[] for _ in self._buffers]
        self._spill = tempfile.TemporaryFile(dir=self._directory)
        self._route(first)

    def _route(self, names: Iterable[str]) -> None:
        route, bounds, buffers, spill, dump = (
            bisect.bisect_right,
            self._bounds,
            self._buffers,
            self._spill,
            marshal.dump,
        )
        for name in names:
            b = route(bounds, name)
            buffer = buffers[b]
            buffer.append(name)
            if len(buffer) >= _FLUSH:
                self._chunks[b].append(spill.tell())
                dump(buffer, spill)
                buffer.clear()

    def __iter__(self) -> Iterator[str]:
        if self._spill is None:
            first, self._first = self._first, []
            first.sort(reverse=self.reverse)
            yield from _once(first)
            return
        order = range(len(self._buffers) - 1, -1, -1) if self.reverse else range(len(self._buffers))
        for b in order:
            with Ordering(
                reverse=self.reverse, memory=self._memory, directory=self._directory, depth=self._depth + 1
            ) as bucket:
                bucket.add(_bucket(self._spill, self._chunks[b], self._buffers[b]))
                self._buffers[b] = []
                yield from bucket
        self.close()

    def close(self) -> None:
        """Remove the spill file (it has no name; this frees its space now rather than at exit)."""
        if self._spill is not None:
            self._spill.close()

    def __enter__(self) -> Ordering:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bucket(spill: Any, offsets: list[int], buffered: list[str]) -> Iterator[str]:
    for offset in offsets:
        spill.seek(offset)
        yield from marshal.load(spill)
    yield from buffered


def _once(names: list[str]) -> Iterator[str]:
    """`names` (sorted) without repeats: a scan may name a key twice (Redis SCAN does), a listing names it once."""
    last = None
    for name in names:
        if name != last:
            yield name
            last = name
