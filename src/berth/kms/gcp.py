"""`GcpKms`: Google Cloud KMS wraps berth's data keys, with the frame's identity and key as AAD.

google-cloud-kms is imported only when the client first talks to KMS (extra `gcpkms`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from berth._errors import BackendError, BerthError, IntegrityError, where
from berth.kms._base import Wrapped, context_where, encode_context

__all__ = ["GcpKms", "crc32c"]

_KEY_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+")
_VERSION = re.compile(r"\d{1,20}")


class GcpKms:
    """Google Cloud KMS as berth's key-encryption service (`encrypt`/`decrypt` with AAD).

    `key_name` is a CryptoKey (`projects/P/locations/L/keyRings/R/cryptoKeys/K`):
    wraps use its primary version, and unwraps any enabled version, so rotating
    the key in Cloud KMS needs nothing from berth. The wrap context, encoded
    canonically, is the request's `additional_authenticated_data`; every
    request and response carries CRC32C checksums as Google recommends.
    Credentials are application default credentials. `client` replaces the
    `KeyManagementServiceClient` (tests, or a client with custom options).
    """

    def __init__(self, key_name: str, *, timeout: float | None = None, client: Any = None):
        if not isinstance(key_name, str) or not _KEY_NAME.fullmatch(key_name) or len(key_name.encode()) > 255:
            raise ValueError(
                f"GcpKms key {key_name!r} is not a CryptoKey name: "
                "projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY"
            )
        self._key_name = key_name
        self._timeout = timeout
        self._client = client
        self._lock = threading.Lock()

    @property
    def key_id(self) -> str:
        """The CryptoKey's resource name."""
        return self._key_name

    @property
    def client(self) -> Any:
        """The `KeyManagementServiceClient`, created on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = _kms_v1().KeyManagementServiceClient()
        return self._client

    def holds(self, key_id: str) -> bool:
        """Whether `key_id` is this client's CryptoKey."""
        return key_id == self._key_name

    def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Wrapped:
        """Cloud KMS `Encrypt` of the data key with `context` as additional authenticated data.

        Returns:
            `Wrapped(key name, primary version number that encrypted, ciphertext)`.

        Raises:
            BackendError: Cloud KMS is unreachable, refuses, or a checksum does not match.
        """
        kms_v1 = _kms_v1()
        plaintext, aad = bytes(data_key), encode_context(context)
        with self._errors("wrap", context, unwrap=False):
            request = kms_v1.EncryptRequest(
                name=self._key_name,
                plaintext=plaintext,
                plaintext_crc32c=crc32c(plaintext),
                additional_authenticated_data=aad,
                additional_authenticated_data_crc32c=crc32c(aad),
            )
            resp = self.client.encrypt(request=request, **self._call_options())
            ciphertext = bytes(resp.ciphertext)
            # Cloud KMS always answers with checksums; a client that answers without any is not checked.
            crc = getattr(resp, "ciphertext_crc32c", None)
            if crc is not None and not (
                crc == crc32c(ciphertext)
                and getattr(resp, "verified_plaintext_crc32c", False)
                and getattr(resp, "verified_additional_authenticated_data_crc32c", False)
            ):
                raise _Corrupted("a checksum of the encrypt request or response did not match")
            _, found, version = str(getattr(resp, "name", "")).rpartition("/cryptoKeyVersions/")
            version = version if found else ""
            return Wrapped(self._key_name, version, ciphertext)

    def unwrap(self, wrapped: Wrapped, *, context: Mapping[str, str]) -> bytes:
        """Cloud KMS `Decrypt` of the wrapped key with `context` as additional authenticated data.

        Raises:
            IntegrityError: not this client's CryptoKey (no call made), or Cloud KMS refuses
                the ciphertext for this context (INVALID_ARGUMENT).
            BackendError: Cloud KMS is unreachable, refuses the caller, the key version is
                disabled or destroyed, or a checksum does not match.
        """
        kms_v1 = _kms_v1()
        identity, key = context_where(context)
        if not self.holds(wrapped.key_id) or not (wrapped.version == "" or _VERSION.fullmatch(wrapped.version)):
            raise IntegrityError(
                f"data key is wrapped under {wrapped.key_id!r} version {wrapped.version!r}, "
                f"not a version of this GcpKms's {self._key_name!r}",
                identity=identity,
                key=key,
            )
        ciphertext, aad = bytes(wrapped.ciphertext), encode_context(context)
        with self._errors("unwrap", context, unwrap=True):
            request = kms_v1.DecryptRequest(
                name=self._key_name,
                ciphertext=ciphertext,
                ciphertext_crc32c=crc32c(ciphertext),
                additional_authenticated_data=aad,
                additional_authenticated_data_crc32c=crc32c(aad),
            )
            resp = self.client.decrypt(request=request, **self._call_options())
            plaintext = bytes(resp.plaintext)
            crc = getattr(resp, "plaintext_crc32c", None)
            if crc is not None and crc != crc32c(plaintext):
                raise _Corrupted("the checksum of the decrypt response did not match")
            return plaintext

    def _call_options(self) -> dict[str, Any]:
        return {} if self._timeout is None else {"timeout": self._timeout}

    @contextmanager
    def _errors(self, op: str, context: Mapping[str, str], *, unwrap: bool) -> Iterator[None]:
        identity, key = context_where(context)
        try:
            yield
        except BerthError:
            raise
        except Exception as exc:
            kind = type(exc).__name__
            # Over REST every 400 arrives as BadRequest: the status in the body tells them apart.
            if unwrap and _status(exc) == "INVALID_ARGUMENT" and "checksum" not in str(exc):
                raise IntegrityError(
                    f"Cloud KMS refuses to decrypt the data key under {self._key_name!r} (INVALID_ARGUMENT): "
                    "changed, or wrapped for another frame",
                    identity=identity,
                    key=key,
                ) from exc
            raise BackendError(
                f"Cloud KMS {op} under {self._key_name!r} failed at {where(identity, key)}: {kind}: {exc}",
                identity=identity,
                key=key,
            ) from exc

    def __repr__(self) -> str:
        return f"GcpKms({self._key_name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A real client does not travel; the copy creates its own. An injected one must pickle.
        client = None if _is_real_client(self._client) else self._client
        return (_rebuild, (self._key_name, self._timeout, client))


def _kms_v1() -> Any:
    try:
        from google.cloud import kms_v1  # type: ignore[attr-defined, unused-ignore]
    except ImportError as exc:
        raise BerthError("GcpKms needs the google-cloud-kms package: pip install 'berthing[gcpkms]'") from exc
    return kms_v1


def _rebuild(key_name: str, timeout: float | None, client: Any) -> GcpKms:
    return GcpKms(key_name, timeout=timeout, client=client)


def _status(exc: Exception) -> str:
    """The canonical status (INVALID_ARGUMENT, ...) of a google.api_core error, over gRPC or REST."""
    code = getattr(exc, "grpc_status_code", None)
    if code is not None:
        return str(getattr(code, "name", code))
    try:
        return str(exc.response.json()["error"]["status"])  # type: ignore[attr-defined]
    except Exception:
        return ""


def _is_real_client(client: Any) -> bool:
    return type(client).__module__.startswith("google.cloud.kms")


class _Corrupted(Exception):
    """A CRC32C check failed: the request or response was corrupted in transit."""


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def _pure_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def _fast_crc32c() -> Any:
    try:
        import google_crc32c  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return None
    return google_crc32c.value


_crc_impl: list[Any] = []


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) of `data`, as Cloud KMS checks it (google-crc32c when installed)."""
    if not _crc_impl:
        _crc_impl.append(_fast_crc32c() or _pure_crc32c)
    return int(_crc_impl[0](data))
