"""The types a backend reads back (`Data`, `Head`) and the helpers of ordered listing.

Order is bytewise UTF-8 of the name. Python compares `str` by code point, which
is the same order (UTF-8 preserves code point order), and so do SQLite's BINARY
collation and PostgreSQL's `COLLATE "C"` on a UTF8 database.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, TypeVar

from berth._errors import FormatError, IntegrityError
from berth._token import Token

__all__ = ["Data", "Head", "sorted_names", "upper_bound"]

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
