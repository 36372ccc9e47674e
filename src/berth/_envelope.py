"""The envelope: what is parked for one suspended run, and how it is encoded."""

from __future__ import annotations

import codecs
import functools
import hashlib
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import msgspec
import orjson

from berth._errors import ConfigDrift, Expired, InvalidEnvelope
from berth._public import publish

__all__ = [
    "CALL_SETTERS",
    "ENVELOPE_SETTERS",
    "ENVELOPE_VERSION",
    "Envelope",
    "PendingCall",
    "check_resumable",
    "digest_file",
    "digest_json",
]

ENVELOPE_VERSION = 1
"""The only envelope version this berth parks and resumes."""

RawJSON = bytes | bytearray | memoryview | str | Any
_encoder = msgspec.json.Encoder()
_LABEL_MAX = 256
_LABELS_MAX = 64


_JSON_SPACE = b" \t\n\r"


def _raw_json(value: Any, what: str) -> bytes:
    """Encode a JSON value once, or validate bytes that already are JSON.

    Bytes are kept verbatim but for surrounding JSON whitespace, which no encoding
    of the envelope could carry. Values are encoded with orjson (the fastest here,
    hot and cold); what it refuses but JSON can hold (integer dict keys, integers
    beyond 64 bits, sets, nesting past 254 levels) is encoded by msgspec instead.
    Non-finite floats (NaN, ±Infinity) have no JSON form (both encoders would write
    null, so the state would not round-trip): they are refused. Bytes must be UTF-8
    throughout, inside strings too, or the state could be parked and then never
    decoded by its resumer.
    """
    if isinstance(value, (bytes, bytearray, memoryview, msgspec.Raw)):
        data = bytes(value).strip(_JSON_SPACE)
        try:
            msgspec.json.decode(data, type=msgspec.Raw)
            if not data.isascii():
                _check_utf8(data)  # msgspec does not check the bytes inside strings
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InvalidEnvelope(f"{what} is not valid JSON: {_short(exc)}") from None
        except UnicodeDecodeError as exc:
            raise InvalidEnvelope(f"{what} is not valid JSON: invalid UTF-8 at byte {exc.start}") from None
        return data
    try:
        data = orjson.dumps(value)
    except TypeError:
        try:
            data = _encoder.encode(value)
        except (TypeError, msgspec.EncodeError, RecursionError) as exc:
            raise InvalidEnvelope(f"{what} cannot be encoded as JSON: {_short(exc)}") from None
        except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so not JSON
            raise InvalidEnvelope(f"{what} cannot be encoded as JSON: a string holds a lone surrogate") from None
    except RecursionError:
        raise InvalidEnvelope(f"{what} cannot be encoded as JSON: nested too deeply") from None
    # Both encoders write NaN and ±Infinity as null: only a value whose JSON holds "null" is walked.
    if _holds_null(data) and _has_non_finite(value):
        raise InvalidEnvelope(f"{what} holds NaN or Infinity, which JSON cannot carry (it would come back as null)")
    return data


_C_SEARCH_FROM = 2048
"""From this size the `null` search is C's `strstr` (below it, calling through ctypes costs more than it saves)."""


def _holds_null(data: bytes) -> bool:
    """Whether the JSON text `data` holds `null` anywhere (exactly: a false positive only costs a walk).

    CPython's own search reads JSON text at ~2.5 GB/s here (~26 µs for a 64 KiB state, ~100 cold:
    more than encoding it); glibc's `strstr` compares 16 or 32 bytes at a time (~1.2 µs). `strstr`
    stops at the first NUL byte, and a bytes object's buffer always ends with one (the C API
    promises it); neither encoder writes a raw NUL (U+0000 is escaped), and data that holds one
    anyway is searched by CPython.
    """
    # Kept, measured (issue 33; CPU, in-process A/B, min of 7): the search with its NUL check takes
    # 2.5 µs against CPython's 15.3 over a 64 KiB state, 1.6 ms against 5.3 over 16 MiB: 22 % and 21 %
    # of building an envelope from a JSON value of that size (44.5 µs, 14.2 ms). Below 2 KiB: unused.
    if len(data) >= _C_SEARCH_FROM and type(data) is bytes:
        strstr = _c_strstr()
        if strstr is not None and b"\0" not in data:  # memchr: ~0.7 µs over 64 KiB
            return strstr(data, b"null") is not None
    return data.rfind(b"null") >= 0  # ~1.6x faster than `in` over JSON text: it skips on "n", rarer than "l"


@functools.cache
def _c_strstr() -> Callable[[bytes, bytes], int | None] | None:
    """The C library's `strstr` (ctypes is imported on the first large state, not with berth), or None."""
    try:
        import ctypes

        strstr = ctypes.CDLL(None).strstr
    except Exception:  # no ctypes, or no C library to load by name (Windows): CPython's search is as exact
        return None
    strstr.restype = ctypes.c_void_p
    strstr.argtypes = (ctypes.c_char_p, ctypes.c_char_p)  # bytes are passed as their buffer: no copy
    found: Callable[[bytes, bytes], int | None] = strstr
    return found


_UTF8_PIECE = 1 << 14
"""Bytes checked per call. A piece's str (up to 4 bytes a character) stays in the CPU's cache: 16 KiB
pieces check a 64 MiB state with emoji and accents in it in ~40 ms of CPU, 256 KiB pieces took ~150."""


def _check_utf8(data: bytes) -> None:
    """Raise `UnicodeDecodeError` unless `data` is UTF-8, never holding more than a piece decoded.

    Decoding 64 MiB of text with one emoji in it at once would build a 256 MiB str (4 bytes a
    character) only to drop it: a large state is checked a piece at a time instead, each piece
    starting where the last one's whole characters ended (a view, never a copy).
    """
    if len(data) <= _UTF8_PIECE:
        data.decode("utf-8")
        return
    decode = codecs.utf_8_decode
    view = memoryview(data)
    size = len(data)
    at = 0
    try:
        while at < size:
            end = at + _UTF8_PIECE
            at += decode(view[at:end], "strict", end >= size)[1]  # a character cut at `end` is left for the next
    except UnicodeDecodeError as exc:
        raise UnicodeDecodeError("utf-8", data, at + exc.start, at + exc.end, exc.reason) from None


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _has_non_finite(value: Any) -> bool:
    """Whether a float NaN or ±Infinity is anywhere in `value` (iterative: no recursion limit).

    Only containers are stacked and the JSON scalars are skipped by exact type, so a state of
    strings, integers and nulls costs one type check an item (~2.5x faster than stacking every item).
    """
    stack = [value]
    pop = stack.pop
    push = stack.append
    isfinite = math.isfinite
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict or isinstance(item, dict):
            item = item.values()
        elif not (kind is list or kind is tuple or isinstance(item, (list, tuple, set, frozenset))):
            if isinstance(item, float) and not isfinite(item):  # only the top value can get here
                return True
            continue
        for x in item:
            kind = type(x)
            if kind is str or kind is int or x is None or kind is bool:
                continue
            if kind is float:
                if x - x != 0.0:  # 0.0 for every finite float; NaN for NaN and ±Infinity
                    return True
            elif isinstance(x, float):
                if not isfinite(x):
                    return True
            else:
                push(x)
    return False


def _aware(value: object, what: str) -> datetime | None:
    if value is None or (type(value) is datetime and value.tzinfo is timezone.utc):
        return value
    if not isinstance(value, datetime):
        raise InvalidEnvelope(f"{what} must be a datetime, got {type(value).__name__}")
    offset = value.utcoffset() if value.tzinfo is not None else None
    if offset is None:
        raise InvalidEnvelope(f"{what} is a naive datetime; berth needs an aware one (tzinfo=timezone.utc)")
    if offset % timedelta(minutes=1):  # JSON offsets are whole minutes: keep the instant exact
        return value.astimezone(timezone.utc)
    return value


def _is_str(value: object) -> bool:
    """A str that is valid UTF-8 (no lone surrogates), so it can be encoded."""
    if type(value) is str and value.isascii():
        return True
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise InvalidEnvelope(message)


def _calls(calls: object) -> tuple[PendingCall, ...]:
    if type(calls) is not tuple:
        _check(
            isinstance(calls, Iterable) and not isinstance(calls, (str, bytes, Mapping)),
            "pending_calls must be a list of PendingCall",
        )
        calls = tuple(calls)  # type: ignore[arg-type]
    for call in calls:
        if not isinstance(call, PendingCall):
            raise InvalidEnvelope("pending_calls must hold PendingCall objects")
    return calls


_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def _labels(labels: object) -> Mapping[str, str]:
    if labels is None:
        return _NO_LABELS
    if not isinstance(labels, Mapping):
        raise InvalidEnvelope("labels must be a dict of str to str")
    if not labels:
        return _NO_LABELS
    if len(labels) > _LABELS_MAX:
        raise InvalidEnvelope(f"at most {_LABELS_MAX} labels")
    for k, v in labels.items():
        if not (_is_str(k) and _is_str(v) and 0 < len(k) <= _LABEL_MAX and len(v) <= _LABEL_MAX):
            raise InvalidEnvelope(f"labels are non-empty str keys and str values of at most {_LABEL_MAX} characters")
    return MappingProxyType(dict(labels))


@dataclass(frozen=True, slots=True)
class PendingCall:
    """One tool call the parked run is waiting on; `input` is raw JSON bytes."""

    id: str
    name: str
    input: bytes = b"{}"

    def __init__(self, id: str, name: str, input: RawJSON = b"{}"):  # noqa: A002 - the contract's name
        _check(_is_str(id) and _is_str(name), "a pending call's id and name are str (valid UTF-8)")
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "input", _raw_json(input, f"pending call {id!r} input"))

    def input_value(self) -> Any:
        """The call's input decoded from JSON (as `Envelope.state` decodes)."""
        return orjson.loads(self.input)

    def __repr__(self) -> str:
        # The input is the run's state: its size only, so a log line or traceback never carries it.
        return f"PendingCall(id={self.id!r}, name={self.name!r}, input=<{len(self.input)} bytes>)"


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class Envelope:
    """What is parked for one run: its state and what is needed to resume it safely.

    Immutable. `provider_state` and `loop_state` are raw JSON bytes: pass bytes
    of JSON (validated, kept verbatim) or any JSON value (encoded once).

    Binary state: with `content_type` set (a MIME type such as ``application/msgpack``),
    `provider_state` is opaque bytes, kept and returned untouched (never validated, never
    base64 in JSON); such an envelope is parked in a frame of format 2 (docs/store.md, *Frames*).
    """

    provider_state: bytes
    version: int = ENVELOPE_VERSION
    provider: str = ""
    model: str = ""
    config_digest: str = ""
    run_id: str = ""
    loop_state: bytes | None = None
    pending_calls: tuple[PendingCall, ...] = ()
    turn: int = 0
    remaining_turns: int = 0
    reason: str = ""
    trace_id: str = ""
    deadline: datetime | None = None
    created_at: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    content_type: str | None = None
    """None: `provider_state` is JSON. Else the declared type of the opaque bytes it holds."""

    # Written out (not generated) so the parameters accept what the fields are built from:
    # any JSON value or bytes of JSON for the raw fields, any iterable of calls, any mapping.
    def __init__(
        self,
        *,
        provider_state: RawJSON,
        version: int = ENVELOPE_VERSION,
        provider: str = "",
        model: str = "",
        config_digest: str = "",
        run_id: str = "",
        loop_state: RawJSON | None = None,
        pending_calls: Iterable[PendingCall] = (),
        turn: int = 0,
        remaining_turns: int = 0,
        reason: str = "",
        trace_id: str = "",
        deadline: datetime | None = None,
        created_at: datetime | None = None,
        labels: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> None:
        if content_type is None:
            _SET_STATE(self, _raw_json(provider_state, "provider_state"))
        else:
            _SET_STATE(self, _binary(provider_state, content_type))
        _SET_TYPE(self, content_type)
        if loop_state is not None:
            loop_state = _raw_json(loop_state, "loop_state")
            if loop_state == b"null":  # JSON null is "no loop state"
                loop_state = None
        _SET_LOOP(self, loop_state)
        texts = (provider, model, config_digest, run_id, reason, trace_id)
        # The usual envelope, ASCII str and plain int throughout, is checked in one expression (the
        # loops below were ~1 µs of every save); anything else goes field by field, for its message.
        if not (
            type(provider) is str
            and type(model) is str
            and type(config_digest) is str
            and type(run_id) is str
            and type(reason) is str
            and type(trace_id) is str
            and "".join(texts).isascii()
        ):
            given = locals()
            for name in _TEXT_FIELDS:
                if not _is_str(given[name]):
                    raise InvalidEnvelope(f"{name} must be a str (valid UTF-8)")
        if not (type(version) is int and type(turn) is int and type(remaining_turns) is int):
            for name, number in (("version", version), ("turn", turn), ("remaining_turns", remaining_turns)):
                if not isinstance(number, int) or isinstance(number, bool):
                    raise InvalidEnvelope(f"{name} must be an int")
        _SET_PROVIDER(self, provider)
        _SET_MODEL(self, model)
        _SET_DIGEST(self, config_digest)
        _SET_RUN_ID(self, run_id)
        _SET_REASON(self, reason)
        _SET_TRACE(self, trace_id)
        _SET_VERSION(self, version)
        _SET_TURN(self, turn)
        _SET_REMAINING(self, remaining_turns)
        _SET_DEADLINE(self, _aware(deadline, "deadline"))
        _SET_CREATED(self, _aware(created_at, "created_at"))
        _SET_CALLS(self, _calls(pending_calls))
        _SET_LABELS(self, _labels(labels))

    def __repr__(self) -> str:
        # Ids, times and sizes: never the state, so a log line or a traceback does not carry it.
        loop = "None" if self.loop_state is None else f"<{len(self.loop_state)} bytes>"
        return (
            f"Envelope(run_id={self.run_id!r}, provider={self.provider!r}, model={self.model!r}, "
            f"provider_state=<{len(self.provider_state)} bytes{_typed(self.content_type)}>, loop_state={loop}, "
            f"pending_calls={[c.id for c in self.pending_calls]!r}, turn={self.turn}, "
            f"deadline={self.deadline!r}, created_at={self.created_at!r}, labels={dict(self.labels)!r})"
        )

    def replace(self, **changes: Any) -> Envelope:
        """A copy with `changes` applied (the envelope itself is immutable)."""
        return replace(self, **changes)

    def state(self) -> Any:
        """`provider_state` decoded from JSON, with orjson.

        Integers beyond 64 bits come back as floats (orjson reads them so); a host
        that parks such numbers decodes the verbatim bytes, `provider_state`, itself.

        Raises `InvalidEnvelope` for a binary state (`content_type` set): read `provider_state`.
        """
        if self.content_type is not None:
            raise InvalidEnvelope(
                f"run {self.run_id!r} parked binary state ({self.content_type}), not JSON: read provider_state"
            )
        return orjson.loads(self.provider_state)

    def __getstate__(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in self.__dataclass_fields__}
        state["labels"] = dict(self.labels)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "labels", MappingProxyType(dict(state["labels"])))


_CONTENT_TYPE_MAX = 255


def _binary(state: object, content_type: object) -> bytes:
    """Opaque state bytes, kept as they are, under a declared content type (checked)."""
    if not (
        type(content_type) is str
        and 0 < len(content_type) <= _CONTENT_TYPE_MAX
        and content_type.isascii()
        and content_type.isprintable()
        and " " not in content_type
    ):
        raise InvalidEnvelope(
            f"content_type must be a non-empty str of at most {_CONTENT_TYPE_MAX} printable ASCII characters "
            "without spaces (a MIME type such as application/msgpack), or None for JSON state"
        )
    if type(state) is bytes:
        return state
    if isinstance(state, (bytes, bytearray, memoryview)):
        return bytes(state)
    raise InvalidEnvelope(f"provider_state of content type {content_type} must be bytes, got {type(state).__name__}")


def _typed(content_type: str | None) -> str:
    return "" if content_type is None else f", {content_type}"


def _slot_setters(cls: type) -> dict[str, Callable[[Any, Any], None]]:
    return {name: cls.__dict__[name].__set__ for name in cls.__dict__["__slots__"]}


ENVELOPE_SETTERS = _slot_setters(Envelope)
"""Each Envelope field's own slot setter, by name: a save and a load each set sixteen (`berth._codec`
sets a loaded envelope's). Kept, measured (issue 33; CPU, in-process A/B, min of 7): fifteen sets
cost 0.72 µs through these against 1.35 through `object.__setattr__` by name (which looks each
descriptor up again), 11 % of building a 1 KiB envelope (5.7 µs) and 6 % of opening its frame (10.5)."""
CALL_SETTERS = _slot_setters(PendingCall)
"""PendingCall's, as ENVELOPE_SETTERS."""
_TEXT_FIELDS = ("provider", "model", "config_digest", "run_id", "reason", "trace_id")
# Each field's setter by its name (a save sets sixteen): never paired with a value by position.
_SET_STATE = ENVELOPE_SETTERS["provider_state"]
_SET_TYPE = ENVELOPE_SETTERS["content_type"]
_SET_PROVIDER = ENVELOPE_SETTERS["provider"]
_SET_MODEL = ENVELOPE_SETTERS["model"]
_SET_DIGEST = ENVELOPE_SETTERS["config_digest"]
_SET_RUN_ID = ENVELOPE_SETTERS["run_id"]
_SET_REASON = ENVELOPE_SETTERS["reason"]
_SET_TRACE = ENVELOPE_SETTERS["trace_id"]
_SET_LOOP = ENVELOPE_SETTERS["loop_state"]
_SET_VERSION = ENVELOPE_SETTERS["version"]
_SET_TURN = ENVELOPE_SETTERS["turn"]
_SET_REMAINING = ENVELOPE_SETTERS["remaining_turns"]
_SET_DEADLINE = ENVELOPE_SETTERS["deadline"]
_SET_CREATED = ENVELOPE_SETTERS["created_at"]
_SET_CALLS = ENVELOPE_SETTERS["pending_calls"]
_SET_LABELS = ENVELOPE_SETTERS["labels"]


# --- digests and the resume check ------------------------------------------------------

_sorted_encoder = msgspec.json.Encoder(order="sorted")


def digest_json(obj: Any) -> str:
    """`sha256:<hex>` over the canonical JSON of `obj` (keys sorted, no whitespace)."""
    try:
        data = _sorted_encoder.encode(obj)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidEnvelope(f"cannot digest a value that is not JSON: {exc}") from None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_file(path: str | os.PathLike[str]) -> str:
    """`sha256:<hex>` over the bytes of the file at `path` (a machine definition, say)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def check_resumable(
    envelope: Envelope,
    *,
    provider: str,
    model: str,
    config_digest: str,
    now: datetime | None = None,
) -> None:
    """Refuse to resume an envelope parked under another config, or past its deadline.

    Raises:
        ConfigDrift: the version, provider, model or config digest differs;
            the host should rebuild the run from scratch.
        Expired: `now` is strictly after the envelope's deadline.
    """
    for what, have, want in (
        ("envelope version", envelope.version, ENVELOPE_VERSION),
        ("provider", envelope.provider, provider),
        ("model", envelope.model, model),
        ("config digest", envelope.config_digest, config_digest),
    ):
        if have != want:
            raise ConfigDrift(
                f"run {envelope.run_id!r} was parked with {what} {have!r}, "
                f"this host runs {want!r}: rebuild the run from scratch"
            )
    if envelope.deadline is not None:
        now = now or datetime.now(timezone.utc)
        if now.tzinfo is None:
            raise InvalidEnvelope("now is a naive datetime; pass an aware one")
        if now > envelope.deadline:
            raise Expired(
                f"run {envelope.run_id!r} passed its deadline {envelope.deadline.isoformat()}: never resumed",
                deadline=envelope.deadline,
            )


publish(globals())  # its public names read as berth.X
