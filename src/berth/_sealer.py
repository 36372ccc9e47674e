"""The sealer seam: plaintext bytes in, sealed bytes out, and back."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Sealer"]


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
