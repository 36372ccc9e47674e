"""Backends that record the calls a store makes, and run a hook at one chosen moment (a race planted there)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from berth._errors import TokenMismatch
from berth._token import Token
from berth.backends import Backend, Data, Frame, Head, Put, as_backend

__all__ = ["EventBackend", "RecordingBackend"]


class RecordingBackend(Backend):
    """Wraps a backend and records every call: proves that bad input does no I/O."""

    def __init__(
        self,
        inner: Backend,
        before_delete: Callable[[str], object] | None = None,
        before_conditional_put: Callable[[str], object] | None = None,
        after_listing: Callable[[str], object] | None = None,
    ):
        """`before_delete`, `before_conditional_put`: called once, with the name, before the first such
        write. `after_listing`: called once, with the prefix, when `heads` has listed every frame
        under it and before it hands any of them over (a sweep's or a prefix delete's listing)."""
        self.inner = as_backend(inner)
        self.calls: list[str] = []
        self._before_delete = before_delete
        self._before_conditional_put = before_conditional_put
        self._after_listing = after_listing

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        self.calls.append("put")
        if if_match is not None and self._before_conditional_put is not None:
            hook, self._before_conditional_put = self._before_conditional_put, None
            hook(name)
        return self.inner.put(name, data, if_match=if_match, if_absent=if_absent)

    def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        self.calls.append("put_many")
        matching = [item.name for item in items if item.if_match is not None]
        if matching and self._before_conditional_put is not None:
            hook, self._before_conditional_put = self._before_conditional_put, None
            hook(matching[0])
        return self.inner.put_many(items)

    def get(self, name: str) -> tuple[Data, Token] | None:
        self.calls.append("get")
        return self.inner.get(name)

    def delete(self, name: str, token: Token) -> None:
        self.calls.append("delete")
        if self._before_delete is not None:
            hook, self._before_delete = self._before_delete, None
            hook(name)
        self.inner.delete(name, token)

    def scan(self, prefix: str) -> Iterator[str]:
        self.calls.append("scan")
        return self.inner.scan(prefix)

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        self.calls.append("heads")
        if self._after_listing is None:
            return self.inner.heads(prefix, size)
        hook, self._after_listing = self._after_listing, None
        rows = list(self.inner.heads(prefix, size))
        hook(prefix)
        return iter(rows)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        self.calls.append("sorted_heads")
        return self.inner.sorted_heads(prefix, size, limit=limit, reverse=reverse)

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> Iterator[Frame]:
        self.calls.append("sorted_frames")
        bounded = {} if before is None else {"before": before}
        return self.inner.sorted_frames(prefix, limit=limit, reverse=reverse, **bounded)

    def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        self.calls.append("head")
        return self.inner.head(name, size)

    def get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        self.calls.append("get_many")
        return self.inner.get_many(names)

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        self.calls.append("delete_many")
        if self._before_delete is not None and items:
            hook, self._before_delete = self._before_delete, None
            hook(items[0][0])
        return self.inner.delete_many(items)

    def setup(self) -> int | None:
        return self.inner.setup()

    def close(self) -> None:
        self.inner.close()


class EventBackend(RecordingBackend):
    """Records "read" for every frame a listing yields and "get"/"delete" for those calls, in order."""

    def __init__(self, inner: Backend, events: list[str]):
        super().__init__(inner)
        self.events = events

    def get(self, name: str) -> tuple[Data, Token] | None:
        self.events.append("get")
        return self.inner.get(name)

    def delete(self, name: str, token: Token) -> None:
        self.events.append("delete")
        self.inner.delete(name, token)

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        for row in super().heads(prefix, size):
            self.events.append("read")
            yield row

    def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        self.events.append("head")
        return self.inner.head(name, size)
