"""Object names for the object-store backends (`gs://`, `s3://`).

A name `{identity}/{key}` is stored as `{prefix}/{name}`. Both services cap an
object name at 1,024 bytes, so a longer name is stored as its first bytes, the
marker `//` (never inside a berth name: keys have no empty segment) and the
SHA-256 of the name; the full name travels in the object's metadata.
"""

from __future__ import annotations

import base64
import hashlib

from berth._errors import BerthError

__all__ = ["HASHED", "NAME_META", "ObjectNames"]

NAME_META = "berth-name"
HASHED = "//"
_DIGEST_CHARS = 64


class ObjectNames:
    """Maps berth names to object names under one prefix, and back."""

    def __init__(self, scheme: str, prefix: str, max_name_bytes: int):
        prefix = prefix.strip("/")
        if prefix and (any(not seg for seg in prefix.split("/")) or len(prefix.encode()) > 512):
            raise BerthError(f"{scheme}:// prefix {prefix!r} has an empty segment or is longer than 512 bytes")
        self.prefix = prefix
        self.root = prefix + "/" if prefix else ""
        self.max_name = max_name_bytes
        self.keep = max_name_bytes - len(HASHED) - _DIGEST_CHARS
        if self.keep <= len(self.root.encode()) + 8:
            raise BerthError(f"{scheme} max_name_bytes {max_name_bytes} leaves no room after prefix {prefix!r}")

    def object(self, name: str) -> tuple[str, bool]:
        """The object name for `name`, and whether it had to be hashed."""
        full = self.root + name
        raw = full.encode()
        if len(raw) <= self.max_name:
            return full, False
        cut = raw[: self.keep].decode("utf-8", "ignore")
        return cut + HASHED + hashlib.sha256(name.encode()).hexdigest(), True

    @staticmethod
    def metadata(name: str) -> dict[str, str]:
        """The metadata that carries a hashed object's full name."""
        return {NAME_META: base64.urlsafe_b64encode(name.encode()).decode()}

    def name_of(self, obj: str, metadata: dict[str, str] | None) -> str | None:
        """The berth name stored as `obj` (None for an object that is not one of ours)."""
        if not obj.startswith(self.root):
            return None
        rest = obj[len(self.root) :]
        if HASHED not in rest:
            return rest
        encoded = (metadata or {}).get(NAME_META)
        if not encoded:
            return None
        try:
            name = base64.urlsafe_b64decode(encoded.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return name if self.object(name)[0] == obj else None

    def query_prefix(self, prefix: str) -> str:
        """The listing prefix to ask the service for: short enough to include hashed names."""
        full = (self.root + prefix).encode()
        limit = self.keep - 3  # a hashed name keeps at least this many bytes of its name
        return full[:limit].decode("utf-8", "ignore") if len(full) > limit else full.decode()
