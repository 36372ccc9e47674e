"""`AwsKms`: AWS KMS wraps berth's data keys, with the frame's identity and key as encryption context.

boto3 is imported only when the client first talks to KMS (extra `awskms`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from berth._errors import BackendError, BerthError, IntegrityError, where
from berth.kms._base import Wrapped, context_where

__all__ = ["AwsKms"]

_ALIAS = re.compile(r"alias/[A-Za-z0-9/_-]{1,250}")
_KEY_ID = re.compile(
    r"(?:mrk-[0-9a-f]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
)
_ARN = re.compile(r"arn:(aws[a-z-]*):kms:([a-z0-9-]+):(\d{12}):(key|alias)/([A-Za-z0-9/_-]{1,250})")
# Decrypt errors that say "not this ciphertext, not for this context": the frame cannot be opened.
_OPEN_FAILURES = frozenset(
    {"InvalidCiphertextException", "IncorrectKeyException", "NotFoundException", "InvalidKeyUsageException"}
)


class AwsKms:
    """AWS KMS as berth's key-encryption service (`Encrypt`/`Decrypt` with `EncryptionContext`).

    `key_id` is a key id, key ARN, alias name (`alias/berth`) or alias ARN; it
    names the KEK in every frame header. Each wrap records the key ARN KMS
    used, and each unwrap passes a key ARN to `Decrypt` (without one, KMS picks
    the key from the ciphertext, so a data key wrapped under *any* key the host
    may use would open). Only trusted key ARNs are asked for: a key ARN KEK
    trusts itself; a key id, the ARN with that id; an alias, the key it resolves
    to (`DescribeKey`, once, again when a frame names another key), every key
    it was seen to wrap under, and `previous_keys`: after moving an alias to a
    new key, list the old key's ARN there until `reseal` has moved its frames.
    Region and credentials come from boto3's usual chain (`AWS_REGION`,
    `AWS_ENDPOINT_URL`, profiles, instance roles); a key ARN also names its
    region. Transient errors are retried by botocore (`max_attempts`,
    "standard" mode).
    """

    def __init__(
        self,
        key_id: str,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        max_attempts: int = 3,
        timeout: float = 10.0,
        client: Any = None,
        previous_keys: Iterable[str] = (),
    ):
        if not isinstance(key_id, str) or not (
            _ALIAS.fullmatch(key_id) or _KEY_ID.fullmatch(key_id) or _ARN.fullmatch(key_id)
        ):
            raise ValueError(f"AwsKms key {key_id!r} is not a KMS key id, key ARN, alias/NAME or alias ARN")
        previous = tuple(previous_keys) if not isinstance(previous_keys, str) else (previous_keys,)
        for old in previous:
            found = _ARN.fullmatch(old) if isinstance(old, str) else None
            if found is None or found.group(4) != "key":
                raise ValueError(f"AwsKms previous key {old!r} is not a key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)")
        arn = _ARN.fullmatch(key_id)
        self._key_id = key_id
        self._previous = previous
        self._alias = bool(_ALIAS.fullmatch(key_id) or (arn is not None and arn.group(4) == "alias"))
        # Key ARNs this client unwraps under; an alias adds what it resolves to, and what wraps used.
        self._trusted: set[str] = set(previous)
        if arn is not None and arn.group(4) == "key":
            self._trusted.add(key_id)
        self._region = region_name or (arn.group(2) if arn else None)
        self._endpoint_url = endpoint_url
        self._max_attempts = max_attempts
        self._timeout = timeout
        self._client = client
        self._lock = threading.Lock()

    @property
    def key_id(self) -> str:
        """The KEK as configured (key id, key ARN or alias)."""
        return self._key_id

    @property
    def client(self) -> Any:
        """The boto3 KMS client, created on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    try:
                        from botocore.config import Config  # type: ignore[import-untyped, unused-ignore]

                        from berth._boto import session
                    except ImportError as exc:
                        raise BerthError("AwsKms needs the boto3 package: pip install 'berthing[awskms]'") from exc

                    config = Config(
                        retries={"mode": "standard", "max_attempts": self._max_attempts},
                        connect_timeout=self._timeout,
                        read_timeout=self._timeout,
                    )
                    self._client = session().client(
                        "kms", region_name=self._region, endpoint_url=self._endpoint_url, config=config
                    )
        return self._client

    def holds(self, key_id: str) -> bool:
        """Whether `key_id` is this client's KEK."""
        return key_id == self._key_id

    def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Wrapped:
        """KMS `Encrypt` of the data key with `context` as its encryption context.

        Returns:
            `Wrapped(key_id, key ARN that KMS used, ciphertext blob)`.

        Raises:
            BackendError: KMS is unreachable, refuses, or the key is missing or disabled.
        """
        with self._errors("wrap", context, unwrap=False):
            resp = self.client.encrypt(KeyId=self._key_id, Plaintext=bytes(data_key), EncryptionContext=dict(context))
            used = str(resp["KeyId"])
            if self._alias and _ARN.fullmatch(used):
                self._trusted.add(used)  # the alias named this key when this process wrapped under it
            return Wrapped(self._key_id, used, bytes(resp["CiphertextBlob"]))

    def unwrap(self, wrapped: Wrapped, *, context: Mapping[str, str]) -> bytes:
        """KMS `Decrypt` of the wrapped key, under the key ARN it was wrapped with and `context`.

        Raises:
            IntegrityError: not this client's KEK (no call made), a key ARN that cannot be
                this KEK's, or KMS refuses the ciphertext for this context.
            BackendError: KMS is unreachable, throttles, or the key is disabled.
        """
        identity, key = context_where(context)
        if not self.holds(wrapped.key_id):
            raise IntegrityError(
                f"data key is wrapped under {wrapped.key_id!r}, not this AwsKms's {self._key_id!r}",
                identity=identity,
                key=key,
            )
        requested = self._key_arn(wrapped.version, context)
        with self._errors("unwrap", context, unwrap=True, requested=requested):
            resp = self.client.decrypt(
                CiphertextBlob=bytes(wrapped.ciphertext),
                KeyId=requested,
                EncryptionContext=dict(context),
                EncryptionAlgorithm="SYMMETRIC_DEFAULT",
            )
            used = str(resp.get("KeyId") or requested)
            if used != requested:  # KMS must have used the key it was told to; anything else is refused
                raise IntegrityError(
                    f"AWS KMS unwrapped the data key under {used!r}, not the trusted {requested!r}",
                    identity=identity,
                    key=key,
                )
            return bytes(resp["Plaintext"])

    def _key_arn(self, version: str, context: Mapping[str, str]) -> str:
        """The key to ask Decrypt for: the recorded key ARN, if it is one this KEK trusts."""
        identity, key = context_where(context)
        recorded = _ARN.fullmatch(version)
        ok = recorded is not None and recorded.group(4) == "key"
        if ok and version not in self._trusted:
            if _KEY_ID.fullmatch(self._key_id):
                ok = version.endswith(":key/" + self._key_id)
            elif self._alias:
                ok = version in self._resolve(context)
            else:
                ok = False
        if not ok:
            raise IntegrityError(
                f"wrapped data key names KMS key {version!r}, which cannot be {self._key_id!r}: not a key it trusts "
                "(wrapped under another key; an alias's earlier keys go in previous_keys)",
                identity=identity,
                key=key,
            )
        return version

    def _resolve(self, context: Mapping[str, str]) -> set[str]:
        """The key ARN the alias names now (`DescribeKey`), added to the trusted ones; returns them."""
        with self._errors("resolve", context, unwrap=False):
            meta = self.client.describe_key(KeyId=self._key_id)["KeyMetadata"]
        arn = str(meta.get("Arn") or "")
        if _ARN.fullmatch(arn):
            self._trusted.add(arn)
        return self._trusted

    @contextmanager
    def _errors(self, op: str, context: Mapping[str, str], *, unwrap: bool, requested: str = "") -> Iterator[None]:
        identity, key = context_where(context)
        try:
            yield
        except BerthError:
            raise
        except Exception as exc:
            code = _code(exc)
            if unwrap and (code in _OPEN_FAILURES or (code == "AccessDeniedException" and self._usable(requested))):
                raise IntegrityError(
                    f"AWS KMS refuses to unwrap the data key under {self._key_id!r} ({code}): "
                    "changed, or wrapped for another frame",
                    identity=identity,
                    key=key,
                ) from exc
            raise BackendError(
                f"AWS KMS {op} under {self._key_id!r} failed at {where(identity, key)}: {code or type(exc).__name__}",
                identity=identity,
                key=key,
            ) from exc

    def _usable(self, key_arn: str) -> bool:
        """After a refused Decrypt: is the key itself enabled and visible? Then the ciphertext was refused."""
        try:
            meta = self.client.describe_key(KeyId=key_arn)["KeyMetadata"]
        except Exception:
            return False
        return bool(meta.get("Enabled")) and meta.get("KeyState") == "Enabled"

    def __repr__(self) -> str:
        return f"AwsKms({self._key_id!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The boto3 client does not travel: the copy creates its own on first use, at the same
        # endpoint and region (credentials come from the environment of the process it lands in).
        meta = getattr(self._client, "meta", None)
        region = self._region or getattr(meta, "region_name", None)
        endpoint = self._endpoint_url or getattr(meta, "endpoint_url", None)
        return (_rebuild, (self._key_id, region, endpoint, self._max_attempts, self._timeout, self._previous))


def _rebuild(
    key_id: str,
    region: str | None,
    endpoint_url: str | None,
    max_attempts: int,
    timeout: float,
    previous: tuple[str, ...] = (),
) -> AwsKms:
    return AwsKms(
        key_id,
        region_name=region,
        endpoint_url=endpoint_url,
        max_attempts=max_attempts,
        timeout=timeout,
        previous_keys=previous,
    )


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""
