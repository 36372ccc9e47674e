"""`s3://bucket/prefix`: frames as S3 objects; the ETag is the token.

An ETag is the MD5 of the object's bytes, so two saves of identical bytes
would get the same ETag and a token loaded before the second save would still
match it. Every put therefore appends 16 random bytes to the frame and records
their count in the object's metadata (`x-amz-meta-berth-pad`); reads strip
them. Each write gets a fresh ETag, and an object still starts with the
frame's own bytes, so a ranged read of its first bytes is its header.

Deletes and conditional puts send `If-Match: <etag>`, creates send
`If-None-Match: *`. A 412, a 409 `ConditionalRequestConflict` (a racing
request won) and a 404 `NoSuchKey` on a conditional call are `TokenMismatch`
-- unless botocore retried the call after a transient error, in which case an
earlier attempt may have succeeded and the outcome is reported as unknown
(`BackendError`), never as a lost claim. Unconditional puts are repeated only
after `503 SlowDown` (refused before it was applied): retrying one after an
ambiguous failure could re-create an envelope that a waker claimed between
the attempts.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from berth._boto import session as boto_session
from berth._errors import BackendError, BerthError, FormatError, TokenMismatch
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Head, sorted_names
from berth.backends._errmap import ErrorMap, Row, described, precondition_rows
from berth.backends._objects import HASHED, ObjectNames

__all__ = ["S3Backend"]

_PAD = 16
_PAD_META = "berth-pad"
_LOST_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


def _retried(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts") or 0)


def _is_lost(exc: BaseException) -> bool:
    if not isinstance(exc, ClientError):
        return False
    code = _code(exc)
    return code in _LOST_CODES or (not code and _status(exc) in (409, 412))


def _is_absent(exc: ClientError) -> bool:
    return _code(exc) in ("NoSuchKey", "NotFound", "404")


def _detail(exc: BaseException) -> str:
    if isinstance(exc, ClientError):  # its code (or HTTP status) and S3's message; the class name says nothing
        return f"{_code(exc) or _status(exc)}: {str(exc.response.get('Error', {}).get('Message') or exc)[:200]}"
    return described(exc)


_ERRORS = ErrorMap(
    "s3",
    [*precondition_rows(ClientError, _is_lost), Row((ClientError, BotoCoreError, OSError))],
    detail=_detail,
    retried=lambda exc: isinstance(exc, ClientError) and _retried(exc) > 0,
)


class S3Backend(Backend):
    """Frames as objects `{prefix}/{identity}/{key}` in one S3 (or S3-compatible) bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        put_client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        profile_name: str | None = None,
        retry_attempts: int = 5,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        addressing_style: str = "auto",
        page_size: int = 1000,
        max_name_bytes: int = 1024,
    ):
        """Open a bucket.

        Args:
            bucket: the bucket name; it must exist (berth never creates buckets).
            prefix: object names start with `{prefix}/`; empty for the bucket's root.
            client: a ready boto3 S3 client, used for every call (then `endpoint_url`,
                `region_name`, `profile_name` and the retry and timeout options are ignored).
            put_client: the client for unconditional puts (default: `client`, or a twin of the
                client berth builds with retries turned off).
            endpoint_url: an S3-compatible endpoint; default: whatever boto3 resolves
                (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the config file, then AWS).
            region_name: default: boto3's (`AWS_REGION`, `AWS_DEFAULT_REGION`, config), else us-east-1.
            profile_name: a named profile from the AWS config files.
            retry_attempts: total attempts of an idempotent call (botocore standard retry mode).
            connect_timeout: seconds to wait for a connection.
            read_timeout: seconds to wait for a response.
            addressing_style: `auto`, `path` or `virtual`.
            page_size: objects per `list_objects_v2` page (at most 1000).
            max_name_bytes: the service's object-name limit; longer names are stored hashed.

        Raises:
            BerthError: a bad option.
        """
        if not bucket:
            raise BerthError("s3:// URL needs a bucket: s3://bucket/prefix")
        self._names = ObjectNames("s3", prefix, max_name_bytes)
        prefix = self._names.prefix
        if not 1 <= page_size <= 1000:
            raise BerthError(f"s3 page_size must be 1..1000, got {page_size}")
        self.bucket = bucket
        self.prefix = prefix
        self._root = self._names.root
        self._page_size = page_size
        self._attempts = max(1, retry_attempts)
        self._owned: list[Any] = []
        if client is None:
            session = boto_session(profile_name)
            region = region_name or session.region_name or "us-east-1"

            def make(attempts: int) -> Any:
                config = Config(
                    region_name=region,
                    retries={"mode": "standard", "total_max_attempts": attempts},
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                    s3={"addressing_style": addressing_style},
                )
                return session.client("s3", endpoint_url=endpoint_url, config=config)

            client = make(max(1, retry_attempts))
            put_client = put_client or make(1)
            self._owned = [client, put_client]
        self._client = client
        self._put_client = put_client or client

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Backend:
        """Open `s3://bucket/prefix` (options as for the constructor)."""
        parts = urlsplit(url)
        if parts.scheme.lower() != "s3" or not parts.netloc or parts.query or parts.fragment:
            raise BerthError(f"not an s3://bucket/prefix URL: {url!r}")
        return cls(parts.netloc, unquote(parts.path), **options)

    def __repr__(self) -> str:
        return f"S3Backend('s3://{self.bucket}/{self.prefix}')"

    # --- names ------------------------------------------------------------------------

    # --- the seam ---------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new ETag.

        Args:
            name: `{identity}/{key}`.
            data: the frame.
            if_match: write only if the object's ETag is this token.
            if_absent: write only if nothing is stored under `name`.

        Returns:
            The new object's ETag.

        Raises:
            TokenMismatch: the condition did not hold.
            BackendError: S3 failed (a failed unconditional put leaves the previous object).
        """
        if if_match is not None and (if_absent or not _etag(if_match)):
            raise TokenMismatch(f"{name!r} is not at ETag {if_match.value!r}")
        obj, hashed = self._names.object(name)
        metadata = {_PAD_META: str(_PAD)}
        if hashed:
            metadata.update(self._names.metadata(name))
        kwargs: dict[str, Any] = dict(
            Bucket=self.bucket,
            Key=obj,
            Body=bytes(data) + os.urandom(_PAD),
            ContentType="application/octet-stream",
            Metadata=metadata,
        )
        conditional = if_absent or if_match is not None
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        elif if_match is not None:
            kwargs["IfMatch"] = if_match.value
        try:
            if conditional:
                response = self._client.put_object(**kwargs)
            else:
                response = self._put_once(kwargs)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "put", name, conditional=conditional) from exc
        return Token(str(response["ETag"]))

    def _put_once(self, kwargs: dict[str, Any]) -> Any:
        # Repeated only after 503 SlowDown, which S3 answers before applying anything.
        for attempt in range(self._attempts):
            try:
                return self._put_client.put_object(**kwargs)
            except ClientError as exc:
                if _code(exc) != "SlowDown" or attempt + 1 >= self._attempts:
                    raise
                time.sleep(random.uniform(0, min(0.1 * 2**attempt, 5.0)))
        raise AssertionError("unreachable")  # pragma: no cover

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its ETag, or None.

        Raises:
            BackendError: S3 failed.
        """
        obj, _ = self._names.object(name)
        try:
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=obj)
            except ClientError as exc:
                if _is_absent(exc):
                    return None
                raise
            body = response["Body"].read()
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "get", name) from exc
        pad = _pad_of(response, name)
        if pad > len(body):
            raise BackendError(f"s3 object for {name!r} is shorter than its {_PAD_META} metadata says")
        return body[: len(body) - pad], Token(str(response["ETag"]))

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its ETag is `token`.

        Raises:
            TokenMismatch: the object changed, is gone, or never existed.
            BackendError: S3 failed, or a retried delete's outcome is unknown.
        """
        etag = _etag(token)
        if not etag:
            raise TokenMismatch(f"{name!r} is not at ETag {token.value!r}")
        obj, _ = self._names.object(name)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=obj, IfMatch=etag)
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "delete", name, conditional=True) from exc

    def _pages(self, prefix: str) -> Iterator[list[dict[str, Any]]]:
        query = self._names.query_prefix(prefix)
        kwargs: dict[str, Any] = dict(Bucket=self.bucket, Prefix=query, MaxKeys=self._page_size)
        while True:
            try:
                page = self._client.list_objects_v2(**kwargs)
            except _ERRORS.catches as exc:
                raise _ERRORS.error(exc, "list", prefix) from exc
            yield page.get("Contents", [])
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def _listed_name(self, obj: str, prefix: str) -> str | None:
        rest = obj[len(self._root) :] if obj.startswith(self._root) else None
        if rest is None:
            return None
        if HASHED in rest:  # a long name: its metadata has it
            try:
                head = self._client.head_object(Bucket=self.bucket, Key=obj)
            except _ERRORS.catches as exc:
                if isinstance(exc, ClientError) and _is_absent(exc):
                    return None
                raise _ERRORS.error(exc, "head", obj) from exc
            name = self._names.name_of(obj, head.get("Metadata"))
        else:
            name = rest
        return name if name is not None and name.startswith(prefix) else None

    def _named(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(name, object name) of every frame under `prefix`."""
        for page in self._pages(prefix):
            for item in page:
                obj = str(item["Key"])
                name = self._listed_name(obj, prefix)
                if name is not None:
                    yield name, obj

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name under `prefix`, one `list_objects_v2` page at a time.

        Raises:
            BackendError: S3 failed.
        """
        for name, _ in self._named(prefix):
            yield name

    def heads(self, prefix: str, size: int) -> Iterator[tuple[str, Any, Token, int]]:
        """(name, first `size` bytes, ETag, full size) under `prefix`, by ranged reads.

        Raises:
            BackendError: S3 failed.
        """
        for page in self._pages(prefix):
            for item in page:
                obj = str(item["Key"])
                rest = obj[len(self._root) :] if obj.startswith(self._root) else None
                if rest is None or (HASHED not in rest and not rest.startswith(prefix)):
                    continue
                try:
                    head = self._head(obj, size)
                except FormatError as exc:  # one bad object never stops a listing
                    name = self._names.name_of(obj, None)
                    if name is not None and name.startswith(prefix):
                        yield name, exc, Token.ZERO, 0
                    continue
                if head is None:
                    continue
                data, metadata, etag, full = head
                name = self._names.name_of(obj, metadata)
                if name is not None and name.startswith(prefix):
                    yield name, data, etag, full

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order: the listing (names only) ordered in memory -- O(limit)
        with a limit, else O(names) -- then one ranged read per head.

        Raises:
            BackendError: S3 failed.
        """
        for name, obj in sorted_names(self._named(prefix), limit, reverse):
            try:
                head = self._head(obj, size)
            except FormatError as exc:  # one bad object never stops a listing
                yield name, exc, Token.ZERO, 0
                continue
            if head is not None:
                data, _, etag, full = head
                yield name, data, etag, full

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its ETag (a listing's long header)."""
        found = self._head(self._names.object(name)[0], size)
        return None if found is None else (found[0], found[2])

    def _head(self, obj: str, size: int) -> tuple[bytes, dict[str, str], Token, int] | None:
        try:
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=obj, Range=f"bytes=0-{max(size, 1) - 1}")
            except ClientError as exc:
                if _is_absent(exc):
                    return None
                if _status(exc) != 416:
                    raise
                response = None  # an empty object has no byte 0
            if response is None:
                try:
                    response = self._client.get_object(Bucket=self.bucket, Key=obj)
                except ClientError as exc:
                    if _is_absent(exc):
                        return None
                    raise
            body = response["Body"].read()
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "read", obj) from exc
        total = _total_size(response, len(body))
        pad = _pad_of(response, obj)
        full = max(0, total - pad)
        return body[: min(len(body), full, size)], response.get("Metadata") or {}, Token(str(response["ETag"])), full

    def close(self) -> None:
        """Close the connection pools of the clients berth built."""
        for client in self._owned:
            close = getattr(client, "close", None)
            if close is not None:
                close()
        self._owned = []


def _etag(token: Token) -> str:
    return token.value if isinstance(token.value, str) and token.value else ""


def _pad_of(response: dict[str, Any], name: str) -> int:
    value = (response.get("Metadata") or {}).get(_PAD_META)
    if value is None:
        return 0  # written by something other than berth: taken verbatim
    try:
        pad = int(value)
    except ValueError:
        pad = -1
    if not 0 <= pad <= 1024:
        raise FormatError(f"s3 object for {name!r} has a bad {_PAD_META} metadata value {value!r}")
    return pad


def _total_size(response: dict[str, Any], read: int) -> int:
    content_range = str(response.get("ContentRange") or "")
    total = content_range.rpartition("/")[2]
    return int(total) if total.isdigit() else read
