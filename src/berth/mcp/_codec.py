"""`request_state_codec`: the SDK's request-state codec over a berth sealer (AES-GCM keyring or KMS)."""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections import OrderedDict
from datetime import timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp.server.request_state import InvalidRequestState, RequestStateCodec

from berth._errors import IntegrityError
from berth._kms_sealer import KmsSealer
from berth._plaintext import PlaintextSealer
from berth._sealer import Sealer, check_sealer
from berth.kms import Wrapped

__all__ = ["request_state_codec"]

_AAD = b"berth/mcp/request-state/v1\x00"
_SEALED = "b1."  # a berth sealer's bytes
_KMS = "b1k."  # a data key cached from a KMS: wrapped record, nonce, AES-256-GCM
_NONCE = 12
_TAG = 16
_UNWRAPPED_CACHE = 1024


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _b64u_decode(text: str) -> bytes:
    """The strict inverse of `_b64u`: a token that is not the canonical encoding is refused."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise InvalidRequestState("malformed") from None
    if _b64u(raw) != text:
        raise InvalidRequestState("malformed")
    return raw


def request_state_codec(
    sealer: Sealer, *, audience: str = "", data_key_ttl: timedelta = timedelta(hours=1)
) -> RequestStateCodec:
    """The SDK's request-state codec over a berth sealer (pass it as `RequestStateSecurity(codec=...)`).

    Args:
        sealer: `berth.AesGcmSealer` (the keyring's primary seals, every key it holds opens),
            `berth.KmsSealer` (a data key wrapped once per `data_key_ttl`, unwrapped keys cached:
            no KMS call per token) or any other berth sealer whose `seal`/`open` are local.
        audience: the server the tokens are for (its name); a token sealed for another audience,
            under the same keys, fails to open.
        data_key_ttl: with a KMS sealer, how long one wrapped data key seals new tokens.

    Returns:
        An object with `seal(bytes) -> str` and `unseal(str) -> bytes`; `unseal` raises the SDK's
        `InvalidRequestState` for every token it did not mint unmodified.

    Raises:
        TypeError: `sealer` is not a berth sealer, or is `PlaintextSealer` (request state needs integrity).
        ValueError: `data_key_ttl` is not positive.
    """
    check_sealer(sealer, "request_state_codec: sealer")
    if isinstance(sealer, PlaintextSealer):
        raise TypeError("request_state_codec needs a real sealer (AesGcmSealer, KmsSealer): plaintext has no integrity")
    if not isinstance(audience, str):
        raise TypeError(f"request_state_codec: audience must be a str, not {type(audience).__name__}")
    if data_key_ttl <= timedelta(0):
        raise ValueError(f"request_state_codec: data_key_ttl must be positive, got {data_key_ttl}")
    aad = _AAD + audience.encode("utf-8", "surrogatepass")
    if isinstance(sealer, KmsSealer):
        return _KmsCodec(sealer, aad, audience, data_key_ttl.total_seconds())
    return _SealerCodec(sealer, aad)


class _SealerCodec:
    """Tokens sealed by the berth sealer itself (AES-GCM keyring: local, synchronous)."""

    def __init__(self, sealer: Sealer, aad: bytes):
        self._sealer = sealer
        self._aad = _SEALED.encode() + aad

    def seal(self, payload: bytes) -> str:
        return _SEALED + _b64u(self._sealer.seal(bytes(payload), aad=self._aad))

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith(_SEALED):
            raise InvalidRequestState("malformed")
        raw = _b64u_decode(token[len(_SEALED) :])
        try:
            return self._sealer.open(raw, aad=self._aad)
        except IntegrityError:
            raise InvalidRequestState("seal") from None

    def __repr__(self) -> str:
        return f"request_state_codec({self._sealer!r})"


class _KmsCodec:
    """Tokens under a KMS-wrapped data key that is reused for `ttl` seconds and cached once unwrapped.

    Token bytes: wrapped record length (2) | record | nonce (12) | AES-256-GCM ciphertext + tag;
    the record is KEK name length (1) | KEK name | KEK version length (1) | version | the KMS's
    ciphertext, and is part of the associated data, so it cannot be swapped.
    """

    def __init__(self, sealer: KmsSealer, aad: bytes, audience: str, ttl: float):
        self._kms = sealer.kms
        self._aad = _KMS.encode() + aad
        self._context = {"berth:mcp-request-state": audience}
        self._ttl = ttl
        self._lock = threading.Lock()
        self._current: tuple[float, str, bytes, AESGCM] | None = None  # made at, KEK, record, AESGCM
        self._opened: OrderedDict[bytes, AESGCM] = OrderedDict()

    def _sealing_key(self) -> tuple[bytes, AESGCM]:
        now = time.monotonic()
        with self._lock:
            current = self._current
            if current is None or now - current[0] >= self._ttl or current[1] != self._kms.key_id:
                data_key = secrets.token_bytes(32)
                wrapped = self._kms.wrap(data_key, context=self._context)
                kek, version = wrapped.key_id.encode(), wrapped.version.encode()
                record = b"".join((bytes((len(kek),)), kek, bytes((len(version),)), version, bytes(wrapped.ciphertext)))
                aead = AESGCM(data_key)
                current = self._current = (now, wrapped.key_id, record, aead)
                self._remember(record, aead)
            return current[2], current[3]

    def _remember(self, record: bytes, aead: AESGCM) -> None:
        self._opened[record] = aead
        self._opened.move_to_end(record)
        while len(self._opened) > _UNWRAPPED_CACHE:
            self._opened.popitem(last=False)

    def seal(self, payload: bytes) -> str:
        record, aead = self._sealing_key()
        nonce = secrets.token_bytes(_NONCE)
        head = len(record).to_bytes(2, "big") + record
        return _KMS + _b64u(head + nonce + aead.encrypt(nonce, bytes(payload), self._aad + head))

    def _opener(self, record: bytes) -> AESGCM:
        with self._lock:
            aead = self._opened.get(record)
            if aead is not None:
                self._opened.move_to_end(record)
                return aead
        try:
            n = record[0]
            kek = record[1 : 1 + n].decode()
            m = record[1 + n]
            version = record[2 + n : 2 + n + m].decode()
            ciphertext = record[2 + n + m :]
        except (IndexError, UnicodeDecodeError):
            raise InvalidRequestState("malformed") from None
        if not ciphertext or not self._kms.holds(kek):
            raise InvalidRequestState("unknown key")
        try:
            data_key = self._kms.unwrap(Wrapped(kek, version, ciphertext), context=self._context)
        except IntegrityError:
            raise InvalidRequestState("unwrap") from None
        if len(data_key) != 32:
            raise InvalidRequestState("unwrap")
        aead = AESGCM(bytes(data_key))
        with self._lock:
            self._remember(record, aead)
        return aead

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith(_KMS):
            raise InvalidRequestState("malformed")
        raw = _b64u_decode(token[len(_KMS) :])
        if len(raw) < 2:
            raise InvalidRequestState("malformed")
        end = 2 + int.from_bytes(raw[:2], "big")
        if len(raw) < end + _NONCE + _TAG:
            raise InvalidRequestState("malformed")
        head, nonce, body = raw[:end], raw[end : end + _NONCE], raw[end + _NONCE :]
        aead = self._opener(head[2:])
        try:
            return bytes(aead.decrypt(nonce, body, self._aad + head))
        except InvalidTag:
            raise InvalidRequestState("seal") from None

    def __repr__(self) -> str:
        return f"request_state_codec(KmsSealer({self._kms!r}))"
