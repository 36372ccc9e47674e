"""The KMS protocol, the wrapped-key record and the wrap context shared by every KMS client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ["CONTEXT_IDENTITY", "CONTEXT_KEY", "Kms", "Wrapped", "context_where", "encode_context"]

CONTEXT_IDENTITY = "berth:identity"
CONTEXT_KEY = "berth:key"


class Wrapped(NamedTuple):
    """A data key wrapped by a KMS: the KEK's name, the KEK version that wrapped it, the KMS's ciphertext."""

    key_id: str
    version: str
    ciphertext: bytes


@runtime_checkable
class Kms(Protocol):
    """The small protocol `KmsSealer` needs from a key-encryption service."""

    @property
    def key_id(self) -> str:
        """The name of the key-encryption key (KEK) new data keys are wrapped under."""
        ...

    def holds(self, key_id: str) -> bool:
        """Whether this client can unwrap data keys wrapped under `key_id` (decided without a KMS call)."""
        ...

    def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Wrapped:
        """Wrap `data_key` under the current KEK, bound to `context`.

        Raises:
            BackendError: the KMS is down or refuses.
        """
        ...

    def unwrap(self, wrapped: Wrapped, *, context: Mapping[str, str]) -> bytes:
        """Unwrap a data key wrapped under `context`.

        Raises:
            IntegrityError: the KMS will not unwrap it for this context (changed, moved, another key).
            BackendError: the KMS is down or refuses.
        """
        ...


def encode_context(context: Mapping[str, str]) -> bytes:
    """The canonical bytes of a wrap context (sorted, length-prefixed): AAD for LocalKms and GcpKms."""
    parts = [b"berth-kms-context\x01"]
    for name in sorted(context):
        k, v = name.encode(), context[name].encode()
        parts += (len(k).to_bytes(4, "big"), k, len(v).to_bytes(4, "big"), v)
    return b"".join(parts)


def context_where(context: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The identity and key a wrap context names (None when it names none), for error messages."""
    return context.get(CONTEXT_IDENTITY), context.get(CONTEXT_KEY)
