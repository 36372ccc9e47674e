"""Frames: the bytes stored for one envelope.

    magic (8) | format (1) | header length (4, big-endian) | header (JSON) | sealed body

The header is cleartext so that listing and sweeping need no keys. The seal's
associated data is everything before the body plus the identity and key the
store expects, so a frame that was changed, or moved to another key or
identity, does not open.

The body is the envelope as one JSON object whose last member is
`provider_state`; the header's `state_len` says how long that state is, so a
load takes the state out of the opened body by its offset, without scanning it.
"""

from __future__ import annotations

import struct
from datetime import datetime
from functools import lru_cache

import msgspec

from berth._errors import FormatError, IntegrityError

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "Header",
    "build_aad",
    "encode_header",
    "header_size",
    "parse_frame",
    "peek_header",
    "split_aad",
]

MAGIC = b"\x89BERTH\r\n"
FORMAT_VERSION = 1
_PREFIX = struct.Struct(">8sBI")
PREFIX_SIZE = _PREFIX.size
MAX_HEADER = 64 * 1024


class Header(msgspec.Struct, frozen=True, omit_defaults=True):
    """A frame's cleartext header, as written (field order is the wire order)."""

    format: int
    identity: str
    key: str
    run_id: str
    created_at: datetime
    deadline: datetime | None
    labels: dict[str, str]
    sealer: str
    key_id: str
    body_len: int
    state_len: int | None = None  # absent in frames whose body holds provider_state anywhere

    @property
    def sealed_by(self) -> str:
        """`sealer:key_id`, as listings show it."""
        return f"{self.sealer}:{self.key_id}"


_header_decoder = msgspec.json.Decoder(Header)
_encoder = msgspec.json.Encoder()


def encode_header(h: Header) -> bytes:
    """Magic, format, length and header JSON: the part of the frame before the body."""
    js = _encoder.encode(h)
    if len(js) > MAX_HEADER:
        raise ValueError("frame header too large")
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(js)) + js


def build_aad(head: bytes | memoryview, identity: str, key: str) -> bytes:
    """Associated data of the seal: the frame head plus the expected identity and key."""
    return b"".join((head, _bound(identity, key)))


@lru_cache(maxsize=4096)
def _bound(identity: str, key: str) -> bytes:
    """The length-prefixed identity and key, as the AAD ends (cached: a store names the same few keys)."""
    i, k = identity.encode(), key.encode()
    return b"".join((len(i).to_bytes(2, "big"), i, len(k).to_bytes(2, "big"), k))


def _where(identity: str, key: str) -> str:
    return f"identity {identity!r}, key {key!r}"


def header_size(data: bytes | memoryview) -> int | None:
    """Total size of magic, prefix and header, if `data` starts like a frame."""
    if len(data) < PREFIX_SIZE or bytes(data[:8]) != MAGIC:
        return None
    hlen: int = _PREFIX.unpack_from(data)[2]
    return PREFIX_SIZE + hlen


def split_aad(aad: bytes | memoryview) -> tuple[str, str] | None:
    """The identity and key bound in a store's associated data (`build_aad`'s inverse), or None."""
    view = memoryview(aad)
    n = header_size(view)
    if n is None or len(view) < n + 2:
        return None
    i_end = n + 2 + int.from_bytes(view[n : n + 2], "big")
    if len(view) < i_end + 2 or i_end + 2 + int.from_bytes(view[i_end : i_end + 2], "big") != len(view):
        return None
    try:
        return bytes(view[n + 2 : i_end]).decode(), bytes(view[i_end + 2 :]).decode()
    except UnicodeDecodeError:
        return None


def peek_header(data: bytes | memoryview, identity: str, key: str) -> tuple[Header, int]:
    """Parse the header only (no keys needed); returns it and the body's offset.

    `data` may be just the first bytes of the frame: listing reads only heads.
    `body_len` is the length of the envelope JSON, checked once the body is opened;
    `state_len` the length of `provider_state`, which ends the envelope JSON.
    """
    view = memoryview(data)
    if len(view) < PREFIX_SIZE or view[:8] != MAGIC:
        raise FormatError(f"not a berth frame at {_where(identity, key)}", identity=identity, key=key)
    _, fmt, hlen = _PREFIX.unpack_from(view)
    if fmt != FORMAT_VERSION:
        raise FormatError(
            f"frame at {_where(identity, key)} has format version {fmt}; "
            f"this berth reads {FORMAT_VERSION}: upgrade berth",
            identity=identity,
            key=key,
        )
    end = PREFIX_SIZE + hlen
    if hlen > MAX_HEADER or len(view) < end:
        raise FormatError(f"frame header at {_where(identity, key)} is truncated", identity=identity, key=key)
    try:
        header = _header_decoder.decode(view[PREFIX_SIZE:end])
    except msgspec.DecodeError:
        header = None
    if (
        header is None
        or header.format != FORMAT_VERSION
        or header.created_at.tzinfo is None
        or (header.deadline and header.deadline.tzinfo is None)
    ):
        raise IntegrityError(f"frame header at {_where(identity, key)} is not valid", identity=identity, key=key)
    return header, end


def parse_frame(data: bytes | memoryview, identity: str, key: str) -> tuple[Header, bytes, memoryview]:
    """Split a whole frame into its header, the AAD to open it with, and the sealed body.

    Raises `FormatError` (not a frame, newer format) or `IntegrityError` (a
    header that does not parse, or names another identity or key).
    """
    view = memoryview(data)
    header, end = peek_header(view, identity, key)
    if header.identity != identity or header.key != key:
        raise IntegrityError(
            f"frame at {_where(identity, key)} was written for identity {header.identity!r}, "
            f"key {header.key!r}: moved or swapped",
            identity=identity,
            key=key,
        )
    return header, build_aad(view[:end], identity, key), view[end:]
