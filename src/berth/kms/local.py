"""`LocalKms`: wraps data keys with AES-256-GCM under a local `berth.Keyring`; no cloud."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from berth._aesgcm import Keyring
from berth._errors import IntegrityError
from berth.kms._base import Wrapped, context_where, encode_context

__all__ = ["LocalKms"]

_NONCE = 12
_TAG = 16
_DATA_KEY = 32
WRAPPED_SIZE = _NONCE + _DATA_KEY + _TAG
_KEK_INFO = b"berth LocalKms key-encryption key v1"


class LocalKms:
    """A KMS in-process: each key of a `berth.Keyring` is a key-encryption key (KEK).

    Wraps under the keyring's primary key and unwraps under any key it holds;
    the wrap context is the AES-GCM associated data, so a wrapped key moved to
    another frame does not unwrap. The wrapping keys are derived from the
    keyring's keys (HKDF-SHA256), so one keyring file can also serve an
    `AesGcmSealer` without the two uses ever sharing a key. For development and
    on-premises hosts; the keyring file is as secret as the data it protects.
    """

    def __init__(self, keyring: Keyring):
        if not isinstance(keyring, Keyring):
            raise TypeError("LocalKms needs a berth.Keyring (Keyring.generate() or Keyring.load(path))")
        self._keyring = keyring
        self._keks = {kid: AESGCM(_derive(keyring.key(kid) or b"")) for kid in keyring.key_ids}
        self._nonce: Callable[[], bytes] = lambda: os.urandom(_NONCE)  # known-answer tests inject a fixed nonce

    @property
    def keyring(self) -> Keyring:
        """The keyring whose keys are this KMS's KEKs."""
        return self._keyring

    @property
    def key_id(self) -> str:
        """The keyring's primary key id: the KEK new data keys are wrapped under."""
        return self._keyring.primary

    def holds(self, key_id: str) -> bool:
        """Whether the keyring holds `key_id`."""
        return key_id in self._keyring

    def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Wrapped:
        """Wrap `data_key` under the primary KEK with `context` as associated data.

        Returns:
            `Wrapped(key_id, "", nonce + ciphertext + tag)`.
        """
        kid = self._keyring.primary
        nonce = self._nonce()
        return Wrapped(kid, "", nonce + self._keks[kid].encrypt(nonce, bytes(data_key), encode_context(context)))

    def unwrap(self, wrapped: Wrapped, *, context: Mapping[str, str]) -> bytes:
        """Unwrap a data key wrapped under `context`.

        Raises:
            IntegrityError: a KEK this keyring does not hold, a wrapped key of the wrong
                length, or one that was changed or wrapped for another context.
        """
        identity, key = context_where(context)
        aead = self._keks.get(wrapped.key_id)
        if aead is None:
            raise IntegrityError(
                f"data key is wrapped under KEK {wrapped.key_id!r}, which this LocalKms does not hold",
                identity=identity,
                key=key,
            )
        blob = bytes(wrapped.ciphertext)
        if len(blob) != WRAPPED_SIZE:
            raise IntegrityError(
                f"wrapped data key is {len(blob)} bytes; LocalKms wraps to {WRAPPED_SIZE}", identity=identity, key=key
            )
        try:
            return aead.decrypt(blob[:_NONCE], blob[_NONCE:], encode_context(context))
        except InvalidTag:
            raise IntegrityError(
                f"LocalKms refuses to unwrap the data key under KEK {wrapped.key_id!r}: "
                "changed, or wrapped for another frame",
                identity=identity,
                key=key,
            ) from None

    def __repr__(self) -> str:
        return f"LocalKms({self._keyring!r})"

    def __reduce__(self) -> tuple[type[LocalKms], tuple[Keyring]]:
        return (LocalKms, (self._keyring,))


def _derive(key: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEK_INFO).derive(key)
