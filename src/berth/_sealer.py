"""The sealer seam: plaintext bytes in, sealed bytes out, and back; plus the piecewise fast path.

A sealer implements `Sealer` (`seal`, `open`, `can_open`, `name`, `key_id`).
One that also implements `PartsSealer` (`seal_parts`, `open_parts`) lets the
codec seal a frame's head and body parts into one buffer and cut the opened
body at the state's offsets, so a large state is never copied whole. The
built-in sealers all do (`MultiSealer` too, so rotation keeps the fast path);
`as_parts` gives any other sealer the same calls by joining.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Protocol, runtime_checkable

from berth._public import publish

__all__ = ["LARGE_FRAME", "FrameBuffer", "PartsSealer", "Sealer", "as_parts", "check_sealer"]

LARGE_FRAME = 1 << 20
"""The one "large frame" threshold: from this size a frame (or a body) is moved without a whole
copy -- sealed and opened piece by piece, returned by a backend as a view of the buffer it was
read into, written and read in pieces -- because one more pass over it costs more than the call."""


class FrameBuffer(bytearray):
    """A large frame sealed into a buffer of its own, which its maker hands over whole.

    Nothing else holds or changes it once it is returned, so a backend that keeps frames in
    memory may keep this one as it is instead of copying it to `bytes` (a pass over the whole
    frame: at 16 MiB, about a third of what sealing costs). Any other `bytearray` is copied.
    """

    __slots__ = ()


@runtime_checkable
class Sealer(Protocol):
    """Turns plaintext into sealed bytes and back; never takes a nonce from the caller.

    `name` and `key_id` are written in every frame's cleartext header (as
    `sealed_by`) so a frame can be listed, and routed to the right key, without
    being opened. `open` raises `berth.IntegrityError` for every failure.
    """

    name: str

    @property
    def key_id(self) -> str:
        """The id of the key new frames are sealed under."""
        ...

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        """Seal `plaintext`, binding `aad` (associated data) to it."""
        ...

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        """Return the plaintext, or raise `IntegrityError` if anything does not match."""
        ...

    def can_open(self, sealer: str, key_id: str) -> bool:
        """Whether a frame sealed by `sealer` under `key_id` is one this sealer can open."""
        ...


@runtime_checkable
class PartsSealer(Sealer, Protocol):
    """A sealer with the piecewise fast path: the same seal, taken and given back in parts."""

    def seal_parts(self, head: bytes, parts: Sequence[bytes], *, aad: bytes) -> bytes:
        """`head`, then the concatenation of `parts` sealed as `seal` would: one buffer, no joined body.

        May come back as a `bytearray` (the built-in AES-GCM and KMS sealers encrypt into the frame's
        buffer: copying it to bytes would cost a pass), which every backend's `put` takes; frames of
        1 MiB and more as a `FrameBuffer`.
        """
        ...

    def open_parts(self, sealed: bytes | memoryview, cuts: Sequence[int], *, aad: bytes) -> list[bytes]:
        """`open`, with the plaintext returned cut at the ascending offsets `cuts`."""
        ...


def check_sealer(sealer: object, what: str) -> None:
    """Raise `TypeError` unless `sealer` has every member of `Sealer` (`what` names who asks)."""
    for attr in ("seal", "open", "can_open", "name", "key_id"):
        if not hasattr(sealer, attr):
            raise TypeError(f"{what} {sealer!r} has no {attr!r}: it is not a berth sealer")


def as_parts(sealer: Sealer) -> PartsSealer:
    """`sealer` itself if it has the fast path, else an adapter that joins and cuts around `seal`/`open`."""
    if isinstance(sealer, PartsSealer):
        return sealer
    return _Joined(sealer)


class _Joined:
    """`PartsSealer` over a plain `Sealer`: the body is joined before `seal` and cut after `open`."""

    __slots__ = ("inner", "name")

    def __init__(self, inner: Sealer):
        self.inner = inner
        self.name = inner.name

    @property
    def key_id(self) -> str:
        return self.inner.key_id

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        return self.inner.seal(plaintext, aad=aad)

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        return self.inner.open(sealed, aad=aad)

    def can_open(self, sealer: str, key_id: str) -> bool:
        return self.inner.can_open(sealer, key_id)

    def seal_parts(self, head: bytes, parts: Sequence[bytes], *, aad: bytes) -> bytes:
        return b"".join((head, self.inner.seal(b"".join(parts), aad=aad)))

    def open_parts(self, sealed: bytes | memoryview, cuts: Sequence[int], *, aad: bytes) -> list[bytes]:
        plain = self.inner.open(bytes(sealed), aad=aad)
        return [plain[i:j] for i, j in pairwise((0, *cuts, len(plain)))]

    def __repr__(self) -> str:
        return repr(self.inner)


publish(globals())  # its public names read as berth.X
