"""`PlaintextSealer`: no confidentiality, for development and tests."""

from __future__ import annotations

import hashlib
import hmac

from berth._errors import IntegrityError

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
        return b"".join((plaintext, _digest(plaintext, aad)))

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        """Return the JSON, or raise `IntegrityError` if the checksum does not match."""
        view = memoryview(sealed)
        if len(view) < _DIGEST:
            raise IntegrityError("plaintext frame is truncated")
        body, tag = view[:-_DIGEST], view[-_DIGEST:]
        if not hmac.compare_digest(_digest(body, aad), tag):
            raise IntegrityError("plaintext frame does not match its checksum: changed or moved")
        return bytes(body)

    def can_open(self, sealer: str, key_id: str) -> bool:
        """True for plaintext frames."""
        return sealer == self.name

    def __repr__(self) -> str:
        return "PlaintextSealer()"


def _digest(body: bytes | memoryview, aad: bytes) -> bytes:
    h = hashlib.sha256(len(aad).to_bytes(8, "big"))
    h.update(aad)
    h.update(body)
    return h.digest()
