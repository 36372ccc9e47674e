"""`memory://`: frames in this process, with one bucket-wide generation counter (as GCS)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from berth._errors import BerthError, TokenMismatch
from berth._sealer import FrameBuffer
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Data

__all__ = ["MemoryBackend"]

_named: dict[str, MemoryBackend] = {}
_named_lock = threading.Lock()


class MemoryBackend(Backend):
    """A dict of frames guarded by a lock; generations count up from 1 across the bucket.

    `memory://` is a fresh, private bucket; `memory://NAME` is shared by every
    store in this process that opens the same name. It has only the four required
    methods, so ordered listing, batched loads and `delete_prefix` take the portable
    way (`berth.backends._bulk`) here: the memory contract run tests that way.
    """

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes | FrameBuffer, int]] = {}
        self._gen = 0
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryBackend:
        if options:
            raise BerthError(f"memory:// takes no options, got {sorted(options)}")
        name = url.partition("://")[2].strip("/")
        if not name:
            return cls()
        with _named_lock:
            return _named.setdefault(name, cls())

    def put(
        self, name: str, data: bytes | bytearray | memoryview, *, if_match: Token | None = None, if_absent: bool = False
    ) -> Token:
        kept: bytes | FrameBuffer = data if type(data) is FrameBuffer else bytes(data)  # a frame sealed for us: no copy
        with self._lock:
            current = self._data.get(name)
            if if_absent and current is not None:
                raise TokenMismatch(f"{name!r} already exists")
            if if_match is not None and (current is None or current[1] != if_match.value):
                raise TokenMismatch(f"{name!r} changed since it was read")
            self._gen += 1
            self._data[name] = (kept, self._gen)
            return Token(self._gen)

    def get(self, name: str) -> tuple[Data, Token] | None:
        with self._lock:
            current = self._data.get(name)
        if current is None:
            return None
        data = current[0]
        # A kept FrameBuffer goes out as a read-only view: a caller cannot change what is parked.
        return (data if type(data) is bytes else memoryview(data).toreadonly()), Token(current[1])

    def delete(self, name: str, token: Token) -> None:
        with self._lock:
            current = self._data.get(name)
            if current is None or current[1] != token.value:
                raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
            del self._data[name]

    def scan(self, prefix: str) -> Iterator[str]:
        with self._lock:
            names = sorted(n for n in self._data if n.startswith(prefix))
        yield from names

    def close(self) -> None:
        pass
