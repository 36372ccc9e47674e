"""`gs://bucket/prefix`: frames as Cloud Storage objects; the object generation is the token.

Save uploads unconditionally, and GCS gives the object a new generation, so
every token loaded before it stops matching. Delete (the claim) and the
conditional put of reseal send `ifGenerationMatch`; a 404 or 412 -- from the
JSON API (`NotFound`, `PreconditionFailed`) or as gRPC status codes
(`NOT_FOUND`, `FAILED_PRECONDITION`) -- is `TokenMismatch`.

Retries follow google-cloud-storage's rule: a call is retried only when it
is idempotent. Reads and listings are; a call carrying a generation
precondition is; an unconditional upload is not (a retry could re-create an
envelope a waker claimed between the two attempts), so save is repeated only
after a 429, which GCS answers before applying anything. A
conditional call that was retried after a transient error and then finds its
precondition gone may have succeeded on the earlier attempt: that is reported
as `BackendError` (outcome unknown), never as a lost claim.

Endpoints and credentials come the way the official client takes them:
`STORAGE_EMULATOR_HOST` selects an emulator with anonymous credentials;
otherwise application default credentials.
"""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import requests.exceptions
import urllib3.exceptions
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import GoogleAuthError, TransportError
from google.cloud import storage  # type: ignore[attr-defined,import-untyped,unused-ignore]
from google.cloud.storage.exceptions import DataCorruption, InvalidResponse  # type: ignore[import-untyped]
from requests import RequestException

from berth._errors import BackendError, BerthError, TokenMismatch
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Head, sorted_names
from berth.backends._errmap import ErrorMap, Row, precondition_rows
from berth.backends._objects import ObjectNames

__all__ = ["GcsBackend"]

_LOST_GRPC = ("NOT_FOUND", "FAILED_PRECONDITION")
_FAILURES: tuple[type[BaseException], ...] = (
    gexc.GoogleAPIError,
    GoogleAuthError,
    RequestException,
    InvalidResponse,
    DataCorruption,
    OSError,
    ValueError,
)
try:  # the gRPC transport's own error, when grpcio is installed
    import grpc  # type: ignore[import-untyped]

    _FAILURES += (grpc.RpcError,)
except ImportError:  # pragma: no cover - grpcio comes with google-api-core[grpc]
    grpc = None


def _grpc_code(exc: BaseException) -> str | None:
    code = getattr(exc, "grpc_status_code", None)
    if code is None and grpc is not None and isinstance(exc, grpc.RpcError):
        method = getattr(exc, "code", None)
        code = method() if callable(method) else None
    return getattr(code, "name", None)


def _http_code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def _is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, gexc.NotFound) or _grpc_code(exc) == "NOT_FOUND"


def _is_lost(exc: BaseException) -> bool:
    """A 404 or 412, from the JSON API or as a gRPC status: the generation precondition did not hold."""
    if _is_not_found(exc):
        # A missing bucket is a misconfiguration, not a lost claim.
        return "bucket does not exist" not in str(exc).lower()
    return (
        isinstance(exc, (gexc.PreconditionFailed, gexc.FailedPrecondition))
        or _http_code(exc) == 412
        or _grpc_code(exc) in _LOST_GRPC
    )


# What an idempotent call retries, built from public names (google-cloud-storage's default predicate
# is reachable only as a private attribute of its DEFAULT_RETRY): the status codes and exception
# types its retry module lists as transient (google-cloud-storage 3.17), HTTP semantics that do not
# change with a release. tests/backends/test_gcs.py pins each decision.
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    gexc.TooManyRequests,
    gexc.InternalServerError,
    gexc.BadGateway,
    gexc.ServiceUnavailable,
    gexc.GatewayTimeout,
    ConnectionError,
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.Timeout,
    http.client.BadStatusLine,
    http.client.IncompleteRead,
    http.client.ResponseNotReady,
    urllib3.exceptions.PoolError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.SSLError,
    urllib3.exceptions.TimeoutError,
)


def _transient(exc: BaseException) -> bool:
    """Whether a failed idempotent call may be retried: a transient error type or status code."""
    if isinstance(exc, _TRANSIENT_TYPES):
        return True
    if isinstance(exc, gexc.GoogleAPICallError):
        return exc.code in _TRANSIENT_STATUS
    if isinstance(exc, InvalidResponse):
        return getattr(getattr(exc, "response", None), "status_code", None) in _TRANSIENT_STATUS
    if isinstance(exc, TransportError) and exc.args and isinstance(exc.args[0], BaseException):
        return _transient(exc.args[0])
    return False


def _throttled(exc: BaseException) -> bool:
    """A 429: the request was refused before it was applied, so even a non-idempotent call may repeat."""
    if isinstance(exc, gexc.TooManyRequests):
        return True
    response = getattr(exc, "response", None)
    return isinstance(exc, InvalidResponse) and getattr(response, "status_code", None) == 429


def _release(exc: BaseException) -> None:
    """Close the HTTP response an error carries, so its pooled connection is not left to the GC."""
    for candidate in (exc, getattr(exc, "__cause__", None), getattr(exc, "__context__", None)):
        response = getattr(candidate, "response", None)
        close = getattr(response, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # releasing is best effort
                pass


class _Attempts:
    """The `on_error` hook of one call's retry: records that a retry happened."""

    def __init__(self) -> None:
        self.retried = False

    def __call__(self, exc: Exception) -> None:
        self.retried = True


def _short(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return str(text).splitlines()[0][:200] if text else ""


_ERRORS = ErrorMap(
    "gcs",
    [*precondition_rows(_FAILURES, _is_lost), Row(_FAILURES)],
    detail=lambda exc: f"{type(exc).__name__}: {_short(exc)}",
    before=_release,
)


class GcsBackend(Backend):
    """Frames as objects `{prefix}/{identity}/{key}` in one Cloud Storage bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        bucket_handle: Any = None,
        endpoint: str | None = None,
        project: str | None = None,
        credentials: Any = None,
        timeout: float = 60.0,
        retry_timeout: float = 30.0,
        page_size: int = 1000,
        max_name_bytes: int = 1024,
    ):
        """Open a bucket.

        Args:
            bucket: the bucket name; it must exist (berth never creates buckets).
            prefix: object names start with `{prefix}/`; empty for the bucket's root.
            client: a ready `google.cloud.storage.Client` (then `endpoint`, `project`
                and `credentials` are ignored).
            bucket_handle: a ready `google.cloud.storage.Bucket` (or an object with the
                same `blob`, `delete_blob` and `list_blobs` methods); wins over `client`.
            endpoint: an emulator's URL, taken exactly like `STORAGE_EMULATOR_HOST`
                (anonymous credentials); default: that variable, else Google's endpoint.
            project: the project for the client; object calls need none.
            credentials: `google.auth` credentials; default: application default credentials
                (anonymous when an emulator is in use).
            timeout: seconds for one HTTP request.
            retry_timeout: seconds to keep retrying an idempotent call; 0 disables retries.
            page_size: objects per list page (at most 1000).
            max_name_bytes: the service's object-name limit; longer names are stored hashed.

        Raises:
            BerthError: a bad option.
        """
        if not bucket:
            raise BerthError("gs:// URL needs a bucket: gs://bucket/prefix")
        self._names = ObjectNames("gs", prefix, max_name_bytes)
        prefix = self._names.prefix
        if not 1 <= page_size <= 1000:
            raise BerthError(f"gcs page_size must be 1..1000, got {page_size}")
        self.prefix = prefix
        self._root = self._names.root
        self._timeout = timeout
        self._retry_timeout = retry_timeout
        self._page_size = page_size
        self._owned_client: Any = None
        if bucket_handle is None:
            if client is None:
                client = self._owned_client = _make_client(endpoint, project, credentials)
            bucket_handle = client.bucket(bucket)
        elif bucket_handle.name != bucket:
            raise BerthError(f"bucket_handle is for bucket {bucket_handle.name!r}, the URL names {bucket!r}")
        self.bucket = bucket
        self._bucket = bucket_handle

    @classmethod
    def from_url(cls, url: str, **options: Any) -> GcsBackend:
        """Open `gs://bucket/prefix` (options as for the constructor; `bucket=` is taken as `bucket_handle`)."""
        parts = urlsplit(url)
        if parts.scheme.lower() != "gs" or not parts.netloc or parts.query or parts.fragment:
            raise BerthError(f"not a gs://bucket/prefix URL: {url!r}")
        if "bucket" in options:
            options["bucket_handle"] = options.pop("bucket")
        return cls(parts.netloc, unquote(parts.path), **options)

    def __repr__(self) -> str:
        return f"GcsBackend('gs://{self.bucket}/{self.prefix}')"

    # --- names ------------------------------------------------------------------------

    def _retry(self, attempts: _Attempts | None = None, predicate: Any = None) -> Any:
        if self._retry_timeout <= 0:
            return None

        def on_error(exc: Exception) -> None:
            _release(exc)  # the library drops a retried response without closing it
            if attempts is not None:
                attempts(exc)

        return gretry.Retry(
            predicate=predicate or _transient,
            initial=0.1,
            maximum=5.0,
            multiplier=2.0,
            timeout=self._retry_timeout,
            on_error=on_error,
        )

    # --- the seam ---------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new generation.

        Args:
            name: `{identity}/{key}`.
            data: the frame.
            if_match: write only if the object is at this generation.
            if_absent: write only if nothing is stored under `name` (`ifGenerationMatch=0`).

        Returns:
            The new object's generation.

        Raises:
            TokenMismatch: the condition did not hold.
            BackendError: GCS failed (a failed unconditional upload leaves the previous object).
        """
        if if_match is not None and (if_absent or not _generation(if_match)):
            raise TokenMismatch(f"{name!r} is not at generation {if_match.value!r}")
        obj, hashed = self._names.object(name)
        blob = self._bucket.blob(obj)
        if hashed:
            blob.metadata = self._names.metadata(name)
        condition = 0 if if_absent else (_generation(if_match) if if_match is not None else None)
        attempts = _Attempts() if condition is not None else None
        # An unconditional upload is retried only after a 429: GCS refused it unapplied.
        retry = self._retry(attempts) if attempts is not None else self._retry(predicate=_throttled)
        try:
            blob.upload_from_string(
                bytes(data),
                content_type="application/octet-stream",
                if_generation_match=condition,
                retry=retry,
                timeout=self._timeout,
            )
            generation = blob.generation
        except _ERRORS.catches as exc:
            retried = attempts is not None and attempts.retried  # read now: the retry hook set it
            raise _ERRORS.error(exc, "put", name, conditional=attempts is not None, retried=retried) from exc
        if not generation:
            raise BackendError(f"gcs put of {name!r} returned no generation")
        return Token(int(generation))

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its generation, or None.

        Raises:
            BackendError: GCS failed.
        """
        obj, _ = self._names.object(name)
        blob = self._bucket.blob(obj)
        try:
            data = blob.download_as_bytes(retry=self._retry(), timeout=self._timeout)
        except _ERRORS.catches as exc:
            if _is_not_found(exc) and _is_lost(exc):
                return None
            raise _ERRORS.error(exc, "get", name) from exc
        if not blob.generation:
            raise BackendError(f"gcs get of {name!r} returned no generation")
        return data, Token(int(blob.generation))

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its generation (a listing's long header).

        Raises:
            BackendError: GCS failed.
        """
        blob = self._bucket.blob(self._names.object(name)[0])
        try:
            data = blob.download_as_bytes(start=0, end=max(size, 1) - 1, retry=self._retry(), timeout=self._timeout)
        except _ERRORS.catches as exc:
            if _is_not_found(exc) and _is_lost(exc):
                return None
            raise _ERRORS.error(exc, "read", name) from exc
        if not blob.generation:
            raise BackendError(f"gcs read of {name!r} returned no generation")
        return data[:size], Token(int(blob.generation))

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if it is at generation `token`.

        Raises:
            TokenMismatch: the object changed, is gone, or never existed.
            BackendError: GCS failed, or a retried delete's outcome is unknown.
        """
        generation = _generation(token)
        if not generation:
            raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
        obj, _ = self._names.object(name)
        attempts = _Attempts()
        try:
            self._bucket.delete_blob(
                obj, if_generation_match=generation, retry=self._retry(attempts), timeout=self._timeout
            )
        except _ERRORS.catches as exc:
            raise _ERRORS.error(exc, "delete", name, conditional=True, retried=attempts.retried) from exc

    def _listed(self, prefix: str) -> Iterator[tuple[str, Any]]:
        query = self._names.query_prefix(prefix)
        blobs = self._bucket.list_blobs(
            prefix=query,
            page_size=self._page_size,
            fields="items(name,generation,size,metadata),nextPageToken",
            retry=self._retry(),
            timeout=self._timeout,
        )
        pages = iter(blobs.pages)
        while True:
            try:
                page = next(pages, None)
                items = list(page) if page is not None else None
            except _ERRORS.catches as exc:
                raise _ERRORS.error(exc, "list", prefix) from exc
            if items is None:
                return
            for blob in items:
                name = self._names.name_of(blob.name, blob.metadata)
                if name is not None and name.startswith(prefix):
                    yield name, blob

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name under `prefix`, one list page at a time.

        Raises:
            BackendError: GCS failed.
        """
        for name, _ in self._listed(prefix):
            yield name

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, generation, full size) under `prefix`, by ranged reads.

        Raises:
            BackendError: GCS failed.
        """
        return self._heads_of(self._listed(prefix), size)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order: the listing (names only) ordered in memory -- O(limit)
        with a limit, else O(names) -- then one ranged read per head.

        Raises:
            BackendError: GCS failed.
        """
        return self._heads_of(sorted_names(self._listed(prefix), limit, reverse), size)

    def _heads_of(self, listed_blobs: Iterable[tuple[str, Any]], size: int) -> Iterator[Head]:
        for name, listed in listed_blobs:
            full = int(listed.size or 0)
            if full == 0 or size <= 0:
                yield name, b"", Token(int(listed.generation)), full
                continue
            blob = self._bucket.blob(listed.name)
            try:
                head = blob.download_as_bytes(
                    start=0, end=min(size, full) - 1, retry=self._retry(), timeout=self._timeout
                )
                if blob.generation != listed.generation:  # rewritten since the listing
                    blob.reload(retry=self._retry(), timeout=self._timeout)
                    full = int(blob.size or 0)
            except _ERRORS.catches as exc:
                if _is_not_found(exc) and _is_lost(exc):
                    continue  # deleted since the listing
                raise _ERRORS.error(exc, "read", name) from exc
            yield name, head[:size], Token(int(blob.generation)), full

    def close(self) -> None:
        """Close the HTTP session of a client berth built."""
        if self._owned_client is not None:
            self._owned_client.close()
            self._owned_client = None


def _generation(token: Token) -> int:
    value = token.value
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _make_client(endpoint: str | None, project: str | None, credentials: Any) -> Any:
    if endpoint:
        # An emulator named in the options, taken as the client takes STORAGE_EMULATOR_HOST.
        return storage.Client(
            project=project or os.environ.get("GOOGLE_CLOUD_PROJECT") or "berth-emulator",
            credentials=credentials or AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": endpoint},
            use_auth_w_custom_endpoint=False,
        )
    # project=None: object calls need no project, and looking one up can mean a metadata-server round trip.
    return storage.Client(project=project, credentials=credentials)
