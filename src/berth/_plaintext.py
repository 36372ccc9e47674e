"""`PlaintextSealer`: no confidentiality, for development and tests."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from itertools import pairwise

from berth._errors import IntegrityError
from berth._public import publish

__all__ = ["PlaintextSealer"]

_DIGEST = 32


class PlaintextSealer:
    """Stores the envelope as readable JSON followed by a SHA-256 of it and its AAD.

    It gives no confidentiality and no protection against a deliberate writer;
    the checksum only makes corruption, moves and accidental edits fail loudly.
    """

    name = "plaintext"
    key_id = "sha256"

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        """Return `plaintext` followed by SHA-256(aad, plaintext)."""
        return self.seal_parts(b"", (plaintext,), aad=aad)

    def seal_parts(self, head: bytes, parts: Sequence[bytes], *, aad: bytes) -> bytes:
        """`head`, then the concatenation of `parts` and its checksum, in one buffer."""
        return b"".join((head, *parts, _digest(parts, aad)))

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        """Return the JSON, or raise `IntegrityError` if the checksum does not match."""
        return self.open_parts(sealed, (), aad=aad)[0]

    def open_parts(self, sealed: bytes | memoryview, cuts: Sequence[int], *, aad: bytes) -> list[bytes]:
        """`open`, with the JSON returned cut at the ascending offsets `cuts`."""
        view = memoryview(sealed)
        if len(view) < _DIGEST:
            raise IntegrityError("plaintext frame is truncated")
        body, tag = view[:-_DIGEST], view[-_DIGEST:]
        if not hmac.compare_digest(_digest((body,), aad), tag):
            raise IntegrityError("plaintext frame does not match its checksum: changed or moved")
        return [bytes(body[i:j]) for i, j in pairwise((0, *cuts, len(body)))]

    def can_open(self, sealer: str, key_id: str) -> bool:
        """True for plaintext frames."""
        return sealer == self.name

    def __repr__(self) -> str:
        return "PlaintextSealer()"


def _digest(parts: Sequence[bytes | memoryview], aad: bytes) -> bytes:
    h = hashlib.sha256(len(aad).to_bytes(8, "big"))
    h.update(aad)
    for part in parts:
        h.update(part)
    return h.digest()


publish(globals())  # its public names read as berth.X
