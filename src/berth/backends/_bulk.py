"""Ordered listing, batched reads and batched conditional deletes: what a backend may offer natively.

Each function here is the portable way to do one of the optional backend calls
with the four required methods alone (`put`, `get`, `delete`, `scan`); a
backend that can do better (one query, one round trip) defines a method of the
same name, and `call_*` prefers it.

Order is bytewise UTF-8 of the name. Python compares `str` by code point, which
is the same order (UTF-8 preserves code point order), and so do SQLite's BINARY
collation and PostgreSQL's `COLLATE "C"` on a UTF8 database.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from berth._errors import FormatError, IntegrityError, TokenMismatch
from berth._token import Token

__all__ = [
    "Head",
    "delete_many",
    "get_many",
    "read_head",
    "sorted_heads",
    "sorted_names",
    "upper_bound",
]

_T = TypeVar("_T", str, tuple[str, str], tuple[str, Any], tuple[str, bytes, Token, int])

Head = tuple[str, bytes, Token, int]
"""(name, the first bytes of the stored data, its token, the data's full size).

In place of the bytes, a backend may give the `FormatError`/`IntegrityError` that reading one
entry raised: a listing yields it flagged and goes on."""


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


def _head_by_get(backend: Any, name: str, size: int) -> Head | None:
    try:
        found = backend.get(name)
    except (FormatError, IntegrityError) as exc:  # one bad value never stops a listing: it is yielded
        return name, exc, Token.ZERO, 0  # type: ignore[return-value]
    if found is None:
        return None
    data, token = found
    return name, bytes(data[:size]), token, len(data)


def sorted_heads(backend: Any, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
    """Heads under `prefix` in name order: the backend's own `sorted_heads`, else scan, sort, read each.

    The portable way reads names only (`scan`) to order them, then one frame per
    head it yields: the first `limit` of a million names cost a million names
    and `limit` reads, never a million frames.
    """
    own = getattr(backend, "sorted_heads", None)
    if own is not None:
        yield from own(prefix, size, limit=limit, reverse=reverse)
        return
    for name in sorted_names(backend.scan(prefix), limit, reverse):
        head = _head_by_get(backend, name, size)
        if head is not None:
            yield head


def get_many(backend: Any, names: Sequence[str]) -> list[tuple[bytes, Token] | None]:
    """`get` of every name, in order: the backend's own `get_many` (one round trip), else one `get` each."""
    own = getattr(backend, "get_many", None)
    if own is not None:
        found: list[tuple[bytes, Token] | None] = own(names)
        return found
    return [backend.get(name) for name in names]


def delete_many(backend: Any, items: Sequence[tuple[str, Token]]) -> list[bool]:
    """Conditionally delete each (name, token); whether each was deleted (False: `TokenMismatch`).

    The backend's own `delete_many` (fewer round trips) if it has one, else one `delete` each.
    """
    own = getattr(backend, "delete_many", None)
    if own is not None:
        done: list[bool] = own(items)
        return done
    out = []
    for name, token in items:
        try:
            backend.delete(name, token)
        except TokenMismatch:
            out.append(False)
        else:
            out.append(True)
    return out


def read_head(backend: Any, name: str, size: int) -> tuple[bytes, Token] | None:
    """The first `size` bytes of the frame `name` and its token: the backend's ranged `head` if it has one."""
    head = getattr(backend, "head", None)
    if head is not None:
        found: tuple[bytes, Token] | None = head(name, size)
        return found
    found = backend.get(name)
    return None if found is None else (bytes(found[0][:size]), found[1])
