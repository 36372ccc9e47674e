"""The types a backend reads back (`Data`, `Head`) and the helpers of ordered listing.

Order is bytewise UTF-8 of the name. Python compares `str` by code point, which
is the same order (UTF-8 preserves code point order), and so do SQLite's BINARY
collation and PostgreSQL's `COLLATE "C"` on a UTF8 database.
"""

from __future__ import annotations

import bisect
import heapq
import marshal
import tempfile
from collections.abc import Generator, Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

from berth._errors import FormatError, IntegrityError
from berth._token import Token

__all__ = ["Data", "Head", "ordered", "sorted_names", "upper_bound"]

Data = bytes | memoryview
"""What a backend reads back: bytes, or (a large frame) a view of the buffer it was read into,
where a copy would cost one more pass over the whole frame."""

Head = tuple[str, Data | FormatError | IntegrityError, Token, int]
"""(name, the first bytes of the stored data, its token, the data's full size).

In place of the bytes, a backend may give the `FormatError`/`IntegrityError` that reading one
entry raised: a listing yields it flagged and goes on."""

_T = TypeVar("_T", str, tuple[str, str], tuple[str, Any], Head)


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
    return _ordered(iter(names), reverse, memory or _SORT_MEMORY, directory, 0)


def _ordered(
    names: Iterator[str], reverse: bool, memory: int, directory: str | None, depth: int
) -> Generator[str, None, None]:
    first = list(islice(names, memory))
    if len(first) < memory or depth >= _DEPTH:
        first.extend(names)  # at the last level: whatever is left, in memory
        first.sort(reverse=reverse)
        yield from _once(first)
        return
    first.sort()
    step = len(first) // _BUCKETS
    bounds = sorted({first[i * step] for i in range(1, _BUCKETS)})
    with tempfile.TemporaryFile(dir=directory) as spill:
        buffers: list[list[str]] = [[] for _ in range(len(bounds) + 1)]
        chunks: list[list[int]] = [[] for _ in buffers]
        route = bisect.bisect_right
        dump = marshal.dump

        def add(source: Iterable[str]) -> None:
            for name in source:
                b = route(bounds, name)
                buffer = buffers[b]
                buffer.append(name)
                if len(buffer) >= _FLUSH:
                    chunks[b].append(spill.tell())
                    dump(buffer, spill)
                    buffer.clear()

        add(first)
        first.clear()
        add(names)
        order = range(len(buffers) - 1, -1, -1) if reverse else range(len(buffers))
        for b in order:
            bucket = _bucket(spill, chunks[b], buffers[b])
            yield from _ordered(bucket, reverse, memory, directory, depth + 1)
            buffers[b] = []


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
