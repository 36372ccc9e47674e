"""`KmsSealer`: envelope encryption, a fresh data key per frame wrapped by a KMS.

Sealed bytes (all lengths big-endian)::

    "K" | format (1) | KEK name length (1) | KEK name | KEK version length (1) | KEK version
        | wrapped key length (2) | wrapped key | nonce (12) | AES-256-GCM ciphertext + tag (16)

The body's associated data is the caller's `aad` followed by every sealed byte
before the ciphertext, so the KEK name, version and wrapped key cannot be
changed either, even where the KMS would not notice.

The wrap context is taken from the associated data the store passes: a store's
AAD is the frame head, then the identity and the key, each behind a 2-byte
length (`berth._codec.build_aad`). The head says its own length, so the two
fields parse exactly; the context is `{"berth:identity": ..., "berth:key": ...}`,
which the KMS binds to the wrapped key and writes to its audit log. Associated
data that is not a frame's (a host sealing bytes of its own) is bound by its
SHA-256 instead (`{"berth:aad-sha256": hex}`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from berth._aesgcm import as_sealed, gcm_open_split, gcm_seal_parts
from berth._codec import split_aad
from berth._errors import BackendError, IntegrityError
from berth._public import publish
from berth.kms._base import CONTEXT_IDENTITY, CONTEXT_KEY, Kms, Wrapped

__all__ = ["KmsSealer", "wrap_context"]

_TAG_BYTE = ord("K")
_FORMAT = 1
_NONCE = 12
_GCM_TAG = 16
_DATA_KEY = 32
MAX_WRAPPED = 8192


def wrap_context(aad: bytes | memoryview) -> dict[str, str]:
    """The KMS context for a seal's associated data: the frame's identity and key when `aad` is a store's."""
    bound = split_aad(aad)
    if bound is not None:
        return {CONTEXT_IDENTITY: bound[0], CONTEXT_KEY: bound[1]}
    return {"berth:aad-sha256": hashlib.sha256(aad).hexdigest()}


class KmsSealer:
    """Envelope encryption: a fresh 256-bit data key per frame, wrapped by a KMS bound to the frame.

    The body is AES-256-GCM under the data key, with the store's associated data;
    the data key is wrapped by `kms` under its key-encryption key (KEK) with the
    frame's identity and key as context. One KMS call per seal (wrap) and per
    open (unwrap); a frame under a KEK the KMS client does not hold is refused
    before any call. A KMS that is down fails the call: nothing falls back to
    plaintext.
    """

    name = "kms"

    def __init__(self, kms: Kms):
        for attr in ("key_id", "holds", "wrap", "unwrap"):
            if not hasattr(kms, attr):
                raise TypeError(
                    f"KmsSealer needs a KMS client (berth.kms.LocalKms, GcpKms, AwsKms); {kms!r} has no {attr!r}"
                )
        _check_name(kms.key_id, "KEK name")
        self._kms = kms
        # Known-answer tests inject fixed values here; nothing else may.
        self._nonce: Callable[[], bytes] = lambda: os.urandom(_NONCE)
        self._data_key: Callable[[], bytes] = lambda: AESGCM.generate_key(bit_length=256)

    @property
    def kms(self) -> Kms:
        """The KMS client that wraps this sealer's data keys."""
        return self._kms

    @property
    def key_id(self) -> str:
        """The name of the KEK new data keys are wrapped under (written in each frame's header)."""
        return self._kms.key_id

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        """Encrypt under a fresh data key and wrap that key with the KMS, bound to the frame.

        Args:
            plaintext: the bytes to seal.
            aad: associated data; from a store, the frame head plus its identity and key.

        Returns:
            The sealed bytes (see the module docstring for the layout).

        Raises:
            BackendError: the KMS is down or refuses to wrap.
        """
        return as_sealed(self.seal_parts(b"", (plaintext,), aad=aad))

    def seal_parts(self, head: bytes, parts: Sequence[bytes], *, aad: bytes) -> bytes:
        """`head` (the store's frame head), then the concatenation of `parts` sealed, in one buffer."""
        data_key = self._data_key()
        wrapped = self._kms.wrap(data_key, context=wrap_context(aad))
        try:
            kek = _check_name(wrapped.key_id, "KEK name")
            version = _check_name(wrapped.version, "KEK version", allow_empty=True)
        except ValueError as exc:
            raise BackendError(f"the KMS answered a wrap with an unusable {exc}") from None
        blob = bytes(wrapped.ciphertext)
        if not 0 < len(blob) <= MAX_WRAPPED:
            raise BackendError(f"the KMS returned a wrapped data key of {len(blob)} bytes (expected 1-{MAX_WRAPPED})")
        nonce = self._nonce()
        sealed_head = b"".join(
            (
                bytes((_TAG_BYTE, _FORMAT, len(kek))),
                kek,
                bytes((len(version),)),
                version,
                len(blob).to_bytes(2, "big"),
                blob,
                nonce,
            )
        )
        return gcm_seal_parts(
            data_key, AESGCM(data_key), nonce, head + sealed_head, parts, b"".join((aad, sealed_head))
        )

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        """Unwrap the frame's data key with the KMS and decrypt.

        Args:
            sealed: bytes from `seal`.
            aad: the same associated data they were sealed with.

        Returns:
            The plaintext.

        Raises:
            IntegrityError: garbage, a changed byte, a frame moved to another identity or key
                (the KMS refuses the context), a KEK the KMS client does not hold (no KMS call
                is made), or a wrapped key of the wrong length.
            BackendError: the KMS is down or refuses the caller.
        """
        return self.open_parts(sealed, (), aad=aad)[0]

    def open_parts(self, sealed: bytes | memoryview, cuts: Sequence[int], *, aad: bytes) -> list[bytes]:
        """`open`, with the plaintext returned cut at the ascending offsets `cuts` (the codec's envelope and state)."""
        view = memoryview(sealed)
        wrapped, start = _parse(view)
        if not self._kms.holds(wrapped.key_id):
            raise IntegrityError(
                f"sealed under KEK {wrapped.key_id!r}, which this KmsSealer ({self._kms!r}) does not hold"
            )
        data_key = self._kms.unwrap(wrapped, context=wrap_context(aad))
        if len(data_key) != _DATA_KEY:
            raise IntegrityError(f"the KMS unwrapped a data key of {len(data_key)} bytes, not {_DATA_KEY}")
        nonce = bytes(view[start : start + _NONCE])
        body = view[start + _NONCE :]
        if len(body) < _GCM_TAG:
            raise IntegrityError("kms-sealed body is truncated")
        key = bytes(data_key)
        try:
            return gcm_open_split(key, AESGCM(key), nonce, body, b"".join((aad, view[: start + _NONCE])), cuts)
        except InvalidTag:
            raise IntegrityError("kms-sealed body failed authentication: tampered, moved or wrong key") from None

    def can_open(self, sealer: str, key_id: str) -> bool:
        """True for kms frames under a KEK the KMS client holds."""
        return sealer == self.name and self._kms.holds(key_id)

    def __repr__(self) -> str:
        return f"KmsSealer({self._kms!r})"

    def __reduce__(self) -> tuple[type[KmsSealer], tuple[Kms]]:
        return (KmsSealer, (self._kms,))


def _check_name(value: object, what: str, *, allow_empty: bool = False) -> bytes:
    ok = isinstance(value, str) and value.isprintable() and (bool(value) or allow_empty)
    raw = value.encode() if isinstance(value, str) else b""
    if not ok or len(raw) > 255:
        raise ValueError(f"{what} {value!r} must be {'0' if allow_empty else '1'}-255 bytes of printable UTF-8")
    return raw


def _parse(view: memoryview) -> tuple[Wrapped, int]:
    """Split sealed bytes into the wrapped key and the offset of the nonce; `IntegrityError` if malformed."""
    try:
        if len(view) < 3 or view[0] != _TAG_BYTE:
            raise IntegrityError("not a kms sealed body")
        if view[1] != _FORMAT:
            raise IntegrityError(f"kms sealed body has format {view[1]}; this berth reads {_FORMAT}")
        pos = 3 + view[2]
        kek = bytes(view[3:pos]).decode()
        vlen = view[pos]
        version = bytes(view[pos + 1 : pos + 1 + vlen]).decode()
        pos += 1 + vlen
        wlen = int.from_bytes(view[pos : pos + 2], "big")
        pos += 2
        blob = bytes(view[pos : pos + wlen])
        pos += wlen
    except (IndexError, UnicodeDecodeError):
        raise IntegrityError("kms sealed body is truncated or malformed") from None
    if not kek or len(blob) != wlen or not 0 < wlen <= MAX_WRAPPED or len(view) < pos + _NONCE + _GCM_TAG:
        raise IntegrityError("kms sealed body is truncated or malformed")
    return Wrapped(kek, version, blob), pos


publish(globals())  # its public names read as berth.X
