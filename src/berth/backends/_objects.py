"""Object names for the object-store backends (`gs://`, `s3://`, `azblob://`).

A name `{identity}/{key}` is stored as `{prefix}/{name}`. The services cap an
object name at 1,024 bytes, so a longer name is stored as its first bytes, the
marker `//` (never inside a berth name: keys have no empty segment) and the
SHA-256 of the name; the full name travels in the object's metadata.

Azure Blob Storage reads a backslash in a blob name as `/` (so `a\\b` and `a/b`
would be one blob) and advises against a segment that ends in a dot; with
`escaped=True` a name's `%`, `\\` and segment-final `.` are stored percent-encoded
(`%25`, `%5C`, `%2E`), which reads back exactly.
"""

from __future__ import annotations

import base64
import hashlib
import re

from berth._errors import BerthError

__all__ = ["HASHED", "NAME_META", "NAME_META_AZURE", "ObjectNames"]

NAME_META = "berth-name"
NAME_META_AZURE = "berth_name"  # an Azure metadata name is a C# identifier: no hyphen
HASHED = "//"
_DIGEST_CHARS = 64
_ESCAPED = re.compile(r"%|\\|\.(?=/|$)")
_UNESCAPED = re.compile(r"%(25|5C|2E)")


def _escape(name: str) -> str:
    return _ESCAPED.sub(lambda m: f"%{ord(m.group()):02X}", name)


def _unescape(text: str) -> str:
    return _UNESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text)


class ObjectNames:
    """Maps berth names to object names under one prefix, and back."""

    def __init__(self, scheme: str, prefix: str, max_name_bytes: int, *, escaped: bool = False, meta: str = NAME_META):
        prefix = prefix.strip("/")
        if prefix and (any(not seg for seg in prefix.split("/")) or len(prefix.encode()) > 512):
            raise BerthError(f"{scheme}:// prefix {prefix!r} has an empty segment or is longer than 512 bytes")
        self.prefix = prefix
        self.root = prefix + "/" if prefix else ""
        self.max_name = max_name_bytes
        self.escaped = escaped
        self.meta = meta
        self.keep = max_name_bytes - len(HASHED) - _DIGEST_CHARS
        if self.keep <= len(self.root.encode()) + 8:
            raise BerthError(f"{scheme} max_name_bytes {max_name_bytes} leaves no room after prefix {prefix!r}")

    def object(self, name: str) -> tuple[str, bool]:
        """The object name for `name`, and whether it had to be hashed."""
        full = self.root + (_escape(name) if self.escaped else name)
        raw = full.encode()
        if len(raw) <= self.max_name:
            return full, False
        cut = raw[: self.keep].decode("utf-8", "ignore")
        if self.escaped:
            cut = cut.rstrip(".")
        return cut + HASHED + hashlib.sha256(name.encode()).hexdigest(), True

    def metadata(self, name: str) -> dict[str, str]:
        """The metadata that carries a hashed object's full name."""
        return {self.meta: base64.urlsafe_b64encode(name.encode()).decode()}

    def name_of(self, obj: str, metadata: dict[str, str] | None) -> str | None:
        """The berth name stored as `obj` (None for an object that is not one of ours)."""
        if not obj.startswith(self.root):
            return None
        rest = obj[len(self.root) :]
        if HASHED not in rest:
            if not self.escaped:
                return rest
            name = _unescape(rest)
            return name if _escape(name) == rest else None  # another program's name: not one of ours
        encoded = (metadata or {}).get(self.meta)
        if not encoded:
            return None
        try:
            name = base64.urlsafe_b64decode(encoded.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return name if self.object(name)[0] == obj else None

    def query_prefix(self, prefix: str) -> str:
        """The listing prefix to ask the service for: short enough to include hashed names."""
        if self.escaped:  # "a." is "a%2E" in a name that ends there, "a." in one that goes on
            prefix = _escape(prefix.rstrip("."))
        full = (self.root + prefix).encode()
        limit = self.keep - 3  # a hashed name keeps at least this many bytes of its name
        if len(full) <= limit:
            return full.decode()
        cut = full[:limit].decode("utf-8", "ignore")
        return cut.rstrip(".") if self.escaped else cut
