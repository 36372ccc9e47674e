"""The codec: the byte layout of a frame and of the envelope body it seals, in one place.

    frame = magic (8) | format (1) | header length (4, big-endian) | header (JSON) | sealed body
    body  = the envelope as one JSON object whose last member is provider_state     (format 1: JSON state)
          = prefix | state | "}"         (the header's `state_len` is len(state))
    body  = every other member of the envelope, content_type too, as one JSON object,
            then the state's bytes as they are: meta | state                         (format 2: binary state)

The header is cleartext so that listing and sweeping need no keys. The seal's
associated data is everything before the body plus the identity and key the
store expects, so a frame that was changed, or moved to another key or
identity, does not open. A load takes the state out of the opened body by its
offset, without scanning it; a sealer that implements the piecewise fast path
(`berth._sealer.PartsSealer`) never copies the state into a joined buffer.

The store calls `seal_frame` (an envelope in, frame bytes out) and `open_frame`
(frame bytes in, an envelope out); nothing else parses a frame, but the sealers
that read the identity, key and sealer the associated data names
(`split_aad`, `peek_header`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

import msgspec

from berth._envelope import CALL_SETTERS, ENVELOPE_SETTERS, Envelope, PendingCall
from berth._errors import BerthError, EnvelopeTooLarge, FormatError, IntegrityError, InvalidEnvelope, where
from berth._sealer import LARGE_FRAME, PartsSealer, Sealer

__all__ = [
    "BINARY_FORMAT_VERSION",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_HEADER",
    "PREFIX_SIZE",
    "READ_FORMATS",
    "Header",
    "build_aad",
    "encode_header",
    "frame_head",
    "header_size",
    "open_frame",
    "peek_header",
    "seal_frame",
    "split_aad",
]

MAGIC = b"\x89BERTH\r\n"
FORMAT_VERSION = 1
"""The format of a frame whose state is JSON: every frame written before binary state, and every such frame since."""
BINARY_FORMAT_VERSION = 2
"""The format of a frame whose state is opaque bytes under a declared `content_type` (`Envelope.content_type`)."""
READ_FORMATS = (FORMAT_VERSION, BINARY_FORMAT_VERSION)
"""The formats this berth opens; any other is a `FormatError`, and the frame is left as it is."""
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
    state_len: int | None = None  # None only in pre-release frames, which are refused
    seq: int | None = None
    """The key's sequence number under a witness (`berth._witness`); absent (and the header byte for
    byte as before) in a store without one. Authenticated with the rest of the header."""

    @property
    def sealed_by(self) -> str:
        """`sealer:key_id`, as listings show it."""
        return f"{self.sealer}:{self.key_id}"


_header_decoder = msgspec.json.Decoder(Header)
_encoder = msgspec.json.Encoder()


# --- the header and the associated data ----------------------------------------------------


def encode_header(h: Header) -> bytes:
    """Magic, format, length and header JSON: the part of the frame before the body."""
    js = _encoder.encode(h)
    if len(js) > MAX_HEADER:
        raise ValueError("frame header too large")
    return _PREFIX.pack(MAGIC, h.format, len(js)) + js


def build_aad(head: bytes | memoryview, identity: str, key: str) -> bytes:
    """Associated data of the seal: the frame head plus the expected identity and key."""
    return b"".join((head, _bound(identity, key)))


def _bound(identity: str, key: str) -> bytes:
    """The length-prefixed identity and key, as the AAD ends.

    Not cached (issue 33, measured: CPU, in-process A/B, min of 7): 0.30 µs made against 0.10 from a
    4,096-entry cache, 2 % of sealing a 1 KiB frame (9.5 µs), less of anything larger.
    """
    i, k = identity.encode(), key.encode()
    return b"".join((len(i).to_bytes(2, "big"), i, len(k).to_bytes(2, "big"), k))


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

    Raises `FormatError` (not a frame, a newer or a pre-release format) or
    `IntegrityError` (a header that does not parse).
    """
    view = memoryview(data)
    # the magic unpacked as bytes with the rest: no slice of the view to compare
    magic, fmt, hlen = _PREFIX.unpack_from(view) if len(view) >= PREFIX_SIZE else (b"", 0, 0)
    if magic != MAGIC:
        raise FormatError(f"not a berth frame at {where(identity, key)}", identity=identity, key=key)
    if fmt not in READ_FORMATS:
        raise FormatError(
            f"frame at {where(identity, key)} has format version {fmt}; "
            f"this berth reads {' and '.join(map(str, READ_FORMATS))}: upgrade berth",
            identity=identity,
            key=key,
        )
    end = PREFIX_SIZE + hlen
    if hlen > MAX_HEADER or len(view) < end:
        raise FormatError(f"frame header at {where(identity, key)} is truncated", identity=identity, key=key)
    try:
        header = _header_decoder.decode(view[PREFIX_SIZE:end])
    except msgspec.DecodeError:
        header = None
    if (
        header is None
        or header.format != fmt
        or header.created_at.tzinfo is None
        or (header.deadline and header.deadline.tzinfo is None)
    ):
        raise IntegrityError(f"frame header at {where(identity, key)} is not valid", identity=identity, key=key)
    if header.state_len is None:
        raise FormatError(
            f"frame at {where(identity, key)} was written by a pre-release berth (no state length); "
            "this berth does not read it",
            identity=identity,
            key=key,
        )
    return header, end


# --- the body: the envelope JSON, state last ---------------------------------------------


class _WireCall(msgspec.Struct, forbid_unknown_fields=False):
    id: str
    name: str
    input: msgspec.Raw


class _WireMeta(msgspec.Struct):
    """Every envelope member but `provider_state`, in the order they are written.

    The one declaration of the body's members: each is the `Envelope` field of the same name, and
    the encoder, the decoder and the setters below are built from these names (`_body_codec`), so
    reordering them changes the bytes written (the golden vectors in tests/vectors fail), never
    which value lands in which field.
    """

    version: int
    provider: str
    model: str
    config_digest: str
    run_id: str
    loop_state: msgspec.Raw  # JSON null when absent
    pending_calls: list[_WireCall]
    turn: int
    remaining_turns: int
    reason: str
    trace_id: str
    deadline: datetime | None
    created_at: datetime
    labels: dict[str, str]


class _WireBinary(_WireMeta):
    """A binary state's body (format 2): every member of `_WireMeta`, then `content_type`; the state follows."""

    content_type: str


STATE_MEMBER = b',"provider_state":'
"""What ends the body's prefix: the envelope JSON is prefix + provider_state + `}`."""
_END = b"}"
_NULL = msgspec.Raw(b"null")


def _call_to_wire(calls: tuple[PendingCall, ...]) -> list[_WireCall]:
    return [_WireCall(c.id, c.name, msgspec.Raw(c.input)) for c in calls]


def _call_from_wire(calls: list[_WireCall]) -> tuple[PendingCall, ...]:
    return tuple(map(_call, calls)) if calls else ()


def _call(c: _WireCall) -> PendingCall:
    call = _new_call(PendingCall)
    _set_call_id(call, c.id)
    _set_call_name(call, c.name)
    _set_call_input(call, bytes(c.input))
    return call


# How a member differs from its Envelope field on the wire, by name; the others are the field's value.
_TO_WIRE: dict[str, Callable[[Any], Any]] = {
    "loop_state": lambda loop: _NULL if loop is None else msgspec.Raw(loop),
    "pending_calls": _call_to_wire,
    "labels": dict,
}
_FROM_WIRE: dict[str, Callable[[Any], Any]] = {
    "loop_state": lambda loop: None if loop == _NULL else bytes(loop),
    "pending_calls": _call_from_wire,
    "labels": MappingProxyType,
}
_new_envelope, _new_call = Envelope.__new__, PendingCall.__new__
_set_call_id, _set_call_name, _set_call_input = CALL_SETTERS["id"], CALL_SETTERS["name"], CALL_SETTERS["input"]


def _body_codec(
    meta: type[msgspec.Struct], binary: bool = False
) -> tuple[Callable[[Envelope, datetime], bytes], Callable[[bytes | memoryview, bytes | memoryview], Envelope]]:
    """The body's prefix encoder and its decoder, built from `meta`'s members by name (`_WireMeta`).

    `binary` (format 2, `_WireBinary`): the prefix is a whole JSON object and the state follows
    it as it is, instead of being the object's last member.

    Generated as straight-line code from the names (as `dataclasses` does): each value is read
    from, and set into, the `Envelope` field of its member's name, in one expression per member.
    Kept, measured (issue 33; CPU per call, `benchmarks/bench_hotpath.py`): the loop over the
    members that this replaced cost ~2 µs more a decoded body (a 1 KiB `open_frame` 12.1 against
    9.45 µs before the declaration by name).
    """
    names: tuple[str, ...] = meta.__struct_fields__
    outside = {"provider_state"} if binary else {"provider_state", "content_type"}
    if set(names) != set(ENVELOPE_SETTERS) - outside:
        raise TypeError(f"the envelope body's members {sorted(names)} are not Envelope's fields but {sorted(outside)}")
    times = {f.name for f in msgspec.structs.fields(meta) if datetime in (f.type, *getattr(f.type, "__args__", ()))}
    scope: dict[str, Any] = {
        "_meta": meta,
        "_encode": _encoder.encode,
        "_decode": msgspec.json.Decoder(meta).decode,
        "_new": _new_envelope,
        "_Envelope": Envelope,
        "_STATE": STATE_MEMBER,
        "_SIZE": len(STATE_MEMBER),
        "_join": b"".join,
        "_DecodeError": msgspec.DecodeError,
        "_ValidationError": msgspec.ValidationError,
        "_set_provider_state": ENVELOPE_SETTERS["provider_state"],
        "_set_content_type": ENVELOPE_SETTERS["content_type"],
    }
    values = []
    for name in names:
        scope[f"_set_{name}"] = ENVELOPE_SETTERS[name]
        if name in _TO_WIRE:
            scope[f"_to_{name}"] = _TO_WIRE[name]
        if name in _FROM_WIRE:
            scope[f"_from_{name}"] = _FROM_WIRE[name]
        # created_at is stamped by the save, not the envelope's own (which may be None).
        value = "created_at" if name == "created_at" else f"env.{name}"
        values.append(f"_to_{name}({value})" if name in _TO_WIRE else value)
    sets = []
    for name in names:
        if name in times:
            sets.append(f"    value = wire.{name}")
            sets.append("    if value is not None and value.tzinfo is None:")
            sets.append('        raise _ValidationError("a time in the envelope is naive")')
            sets.append(f"    _set_{name}(env, value)")
        else:
            value = f"_from_{name}(wire.{name})" if name in _FROM_WIRE else f"wire.{name}"
            sets.append(f"    _set_{name}(env, {value})")
    if binary:
        encode = [f"    return _encode(_meta({', '.join(values)}))"]
        decode = ["    wire = _decode(prefix)"]
    else:
        encode = [f"    return _encode(_meta({', '.join(values)}))[:-1] + _STATE"]
        decode = [
            "    n = len(prefix) - _SIZE",
            "    if n < 2 or prefix[n:] != _STATE:",
            '        raise _DecodeError("the envelope does not end with provider_state")',
            '    wire = _decode(_join((prefix[:n], b"}")))',
        ]
        sets.append("    _set_content_type(env, None)")
    source = "\n".join(
        [
            "def encode_prefix(env, created_at):",
            *encode,
            "def decode_body(prefix, state):",
            *decode,
            "    env = _new(_Envelope)",
            # The slots' own setters (`ENVELOPE_SETTERS`): `object.__setattr__` looks each descriptor up again.
            *sets,
            "    _set_provider_state(env, state)",
            "    return env",
        ]
    )
    exec(compile(source, f"<berth body codec {meta.__name__}>", "exec"), scope)
    encode_prefix, decode_body = scope["encode_prefix"], scope["decode_body"]
    encode_prefix.__doc__ = 'The envelope JSON up to and including `"provider_state":`; the state and `}` follow it.'
    decode_body.__doc__ = (
        "The envelope from a body cut around its state; `state` is kept as it is (a view: see `open_frame`).\n\n"
        "Raises `msgspec.DecodeError`/`ValidationError` on a prefix that is not one `encode_prefix` writes."
    )
    return encode_prefix, decode_body


_encode_prefix, _decode_body = _body_codec(_WireMeta)
_encode_meta, _decode_binary = _body_codec(_WireBinary, binary=True)


# --- whole frames ------------------------------------------------------------------------------


def seal_frame(
    env: Envelope,
    *,
    identity: str,
    key: str,
    created_at: datetime,
    sealer: PartsSealer,
    max_bytes: int,
    seq: int | None = None,
) -> bytes:
    """The frame for `env` parked under `identity`/`key`, sealed by `sealer`.

    `seq` (a witnessed store's per-key sequence number) goes into the authenticated header;
    None leaves the header as a store without a witness writes it.

    Raises `EnvelopeTooLarge` past `max_bytes` of body, `InvalidEnvelope` for a header over
    64 KiB; what the sealer raises (a KMS outage, say) passes through for the store to map.
    """
    state = env.provider_state
    head, prefix = _head(env, state, identity, key, created_at, sealer, max_bytes, seq)
    # The sealer writes the head first and takes the body in parts: the state is never
    # copied into a joined body first.
    parts = (prefix, state, _END) if env.content_type is None else (prefix, state)
    frame: bytes = sealer.seal_parts(head, parts, aad=build_aad(head, identity, key))
    return frame


def frame_head(
    env: Envelope,
    *,
    identity: str,
    key: str,
    created_at: datetime,
    sealer: Sealer,
    max_bytes: int,
    seq: int | None = None,
) -> tuple[bytes, bytes]:
    """The encoded head of `env`'s frame and its body's prefix, checked: what `seal_frame` seals.

    A witnessed store calls it before any I/O (with the largest `seq`) so that an envelope too
    large is refused as early as without a witness. Raises as `seal_frame`, but never seals.
    """
    return _head(env, env.provider_state, identity, key, created_at, sealer, max_bytes, seq)


def _head(
    env: Envelope,
    state: bytes | memoryview,
    identity: str,
    key: str,
    created_at: datetime,
    sealer: Sealer,
    max_bytes: int,
    seq: int | None,
) -> tuple[bytes, bytes]:
    """`frame_head`, its arguments positional (the save path calls it once a save)."""
    if env.content_type is None:
        fmt, prefix = FORMAT_VERSION, _encode_prefix(env, created_at)
        size = len(prefix) + len(state) + 1
    else:
        fmt, prefix = BINARY_FORMAT_VERSION, _encode_meta(env, created_at)
        size = len(prefix) + len(state)
    if size > max_bytes:
        raise EnvelopeTooLarge(
            f"envelope for {where(identity, key)} is {size} bytes encoded; "
            f"this store's limit is {max_bytes} (max_envelope_bytes)",
            identity=identity,
            key=key,
        )
    header = Header(
        fmt,
        identity,
        key,
        env.run_id,
        created_at,
        env.deadline,
        dict(env.labels),
        sealer.name,
        sealer.key_id,
        size,
        len(state),
        seq,
    )
    try:
        head = encode_header(header)
    except ValueError:
        raise InvalidEnvelope(
            f"envelope for {where(identity, key)} needs a cleartext frame header over 64 KiB: "
            "its run_id, labels and key are too long",
            identity=identity,
            key=key,
        ) from None
    return head, prefix


def open_frame(
    data: bytes | memoryview, *, identity: str, key: str, sealer_for: Callable[[Header], PartsSealer]
) -> Envelope:
    """Authenticate and open a whole frame to its envelope.

    `sealer_for` picks the sealer for the header (the store's plaintext policy).
    Raises `FormatError` (not a frame, a newer format, no envelope inside) or
    `IntegrityError` (changed, moved, swapped, a sealer that does not hold the key,
    a header that disagrees with the body).
    """
    view = memoryview(data)
    header, end = peek_header(view, identity, key)
    if header.identity != identity or header.key != key:
        raise IntegrityError(
            f"frame at {where(identity, key)} was written for identity {header.identity!r}, "
            f"key {header.key!r}: moved or swapped",
            identity=identity,
            key=key,
        )
    n, s = header.body_len, header.state_len
    assert s is not None  # peek_header refuses frames without one
    binary = header.format == BINARY_FORMAT_VERSION
    if not (0 <= s <= n - 2 if binary else 0 < s <= n - len(STATE_MEMBER) - 3):
        raise IntegrityError(
            f"frame header at {where(identity, key)} gives a state length its body cannot hold",
            identity=identity,
            key=key,
        )
    sealer = sealer_for(header)
    cuts: tuple[int, ...] = (n - s,) if binary else (n - s - 1, n - 1)
    aad = build_aad(view[:end], identity, key)
    if n < LARGE_FRAME:
        # Opened whole and cut here into bytes of their own (a sealer may reuse its buffer). The state
        # was once kept as a view of the body, decoded without its copy (issue 15.4); dropped in issue
        # 33, measured (CPU, in-process A/B, min of 7): the copy is 1.3 µs at 64 KiB, 0.7 % of a load
        # whose state() is decoded (194 µs), and at 1 KiB the view cost more than the copy (0.22 vs 0.11).
        (body,) = _open_body(sealer, view[end:], aad, (), identity, key)
        whole = memoryview(body)
        if binary:  # the meta decoded from the view (msgspec copies what it keeps), the state its own bytes
            pieces: list[bytes | memoryview] = [whole[: cuts[0]], bytes(whole[cuts[0] :])]
        else:
            pieces = [bytes(whole[: cuts[0]]), bytes(whole[cuts[0] : cuts[1]]), bytes(whole[cuts[1] :])]
        del whole
    else:  # opened piece by piece: the state is its own bytes, never a slice of a whole
        pieces = list(_open_body(sealer, view[end:], aad, cuts, identity, key))
    del view, data
    size = sum(map(len, pieces))
    if size != n:
        raise IntegrityError(
            f"frame at {where(identity, key)} opened to {size} bytes, its header says {n}",
            identity=identity,
            key=key,
        )
    try:
        if binary:
            env = _decode_binary(pieces[0], pieces[1])
        elif pieces[2] != _END:
            raise msgspec.DecodeError("the envelope does not end after provider_state")
        else:
            env = _decode_body(pieces[0], pieces[1])
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise FormatError(
            f"frame at {where(identity, key)} opened but holds no envelope this berth reads",
            identity=identity,
            key=key,
        ) from None
    if env.deadline != header.deadline or env.run_id != header.run_id or env.created_at != header.created_at:
        raise IntegrityError(
            f"frame at {where(identity, key)} has a header that disagrees with its body",
            identity=identity,
            key=key,
        )
    return env


def _open_body(
    sealer: PartsSealer, body: memoryview, aad: bytes, cuts: Sequence[int], identity: str, key: str
) -> list[bytes]:
    try:
        return sealer.open_parts(body, cuts, aad=aad)
    except IntegrityError as exc:
        raise IntegrityError(
            f"frame at {where(identity, key)} does not open: {exc}", identity=identity, key=key
        ) from None
    except BerthError:
        raise
    except Exception as exc:  # a sealer's own failure: fail closed, never return state
        raise IntegrityError(
            f"frame at {where(identity, key)} does not open: {type(exc).__name__}", identity=identity, key=key
        ) from exc
