"""What both Azure Blob backends share, no I/O: options, names, conditions, the client's settings, the error table.

`Blobs` holds one container's layout (object names under a prefix, as `gs://` and
`s3://` store them), the size at which a frame goes up in blocks, and how the
client is built and authenticated; `ERRORS` maps azure-core's exceptions.
"""

from __future__ import annotations

import base64
import os
import random
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, ServiceRequestError

from berth._errors import BerthError, StoreMissing, TokenMismatch
from berth._token import Token
from berth.backends._errmap import ErrorMap, Row, described, precondition_rows
from berth.backends._objects import NAME_META_AZURE, ObjectNames
from berth.backends._url import own_options

__all__ = [
    "CONNECTION_STRING_ENV",
    "ERRORS",
    "Attempts",
    "Blobs",
    "Connection",
    "absent",
    "block_ids",
    "changed_mid_read",
    "full_size",
    "invalid_block_list",
    "parse_url",
    "refused_unapplied",
]

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
_ACCOUNT_ENV = "AZURE_STORAGE_ACCOUNT"
_KEY_ENV = "AZURE_STORAGE_KEY"
_SAS_ENV = "AZURE_STORAGE_SAS_TOKEN"
_MiB = 1024 * 1024
_MAX_BLOCK = 4000 * _MiB  # Put Block's limit (service version 2019-12-12 and later)
_MAX_PUT = 5000 * _MiB  # Put Blob's limit (the same versions)
_MAX_BLOCKS = 50_000  # committed blocks per blob
_LOST_CODES = frozenset({"ConditionNotMet", "BlobAlreadyExists", "BlobNotFound"})


def _code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None) or ""  # a StorageErrorCode (a str enum) or the service's text
    return str(getattr(code, "value", code))


def _status(exc: BaseException) -> int:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else 0


def _is_lost(exc: BaseException) -> bool:
    """A 412 (If-Match did not hold), a 409 `BlobAlreadyExists` (If-None-Match: *) or a 404 on the blob."""
    code = _code(exc)
    return code in _LOST_CODES or (not code and _status(exc) in (404, 409, 412))


def _container_missing(exc: BaseException, call: object = None) -> bool:
    return _code(exc) == "ContainerNotFound"


def absent(exc: BaseException) -> bool:
    """A read found no blob (the container exists: a missing container is `StoreMissing`)."""
    return _code(exc) == "BlobNotFound" or (not _code(exc) and _status(exc) == 404)


def changed_mid_read(exc: BaseException) -> bool:
    """A read of a blob in several ranges found it rewritten between them (its ETag changed): read again."""
    return _code(exc) == "ConditionNotMet" or _status(exc) == 412


def invalid_block_list(exc: BaseException) -> bool:
    """A commit named blocks that are no longer staged: another writer's commit of the same blob discarded
    them. Nothing was written; the upload is staged again."""
    return _code(exc) == "InvalidBlockList"


def refused_unapplied(exc: BaseException) -> bool:
    """The service never applied the request: it was not sent (`ServiceRequestError`) or was refused
    as throttled (503 `ServerBusy`, 429). Only then is an unconditional write repeated: a bare 503
    may come from something between berth and the service, after the write applied."""
    return isinstance(exc, ServiceRequestError) or _code(exc) == "ServerBusy" or _status(exc) == 429


def _detail(exc: BaseException) -> str:
    code = _code(exc) or (_status(exc) or "")
    message = str(getattr(exc, "reason", None) or exc).strip().splitlines()
    text = message[0][:200] if message else ""
    return f"{code}: {text}" if code else described(exc)


ERRORS = ErrorMap(
    "azblob",
    [
        Row(AzureError, StoreMissing, "azblob container of {name!r} does not exist ({detail})", _container_missing),
        *precondition_rows(AzureError, _is_lost),
        Row((AzureError, OSError)),
    ],
    detail=_detail,
)


class Attempts:
    """A call's `retry_hook`: records that the client retried it (an earlier attempt may have applied)."""

    __slots__ = ("retried",)

    def __init__(self) -> None:
        self.retried = False

    def __call__(self, **_: Any) -> None:
        self.retried = True


def block_ids(count: int) -> list[str]:
    """`count` fresh block ids of one upload: random, so two writers staging blocks of the same blob
    at once never commit each other's blocks (a torn frame), all of one length as the service asks."""
    upload = os.urandom(12)
    return [base64.b64encode(upload + at.to_bytes(4, "big")).decode() for at in range(count)]


def full_size(downloader: Any, read: int) -> int:
    """A ranged read's whole blob size, from its `Content-Range` (`bytes 0-99/1234`)."""
    content_range = str(getattr(downloader.properties, "content_range", None) or "")
    total = content_range.rpartition("/")[2]
    return int(total) if total.isdigit() else read


class Connection(NamedTuple):
    """How to reach the account: a connection string, or an account URL and a credential."""

    connection_string: str | None
    account_url: str
    """The account's blob endpoint ("" with a connection string, which names it)."""
    credential: Any
    """A credential given, the account key or SAS token from the environment, or None: then
    azure-identity's `DefaultAzureCredential` (sync or async, as the client)."""


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value


_URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "account": str,
    "account_url": str,
    "page_size": _positive,
    "single_put_size": _positive,
    "block_size": _positive,
    "retry_total": int,
}


def parse_url(url: str, options: dict[str, Any]) -> tuple[str, str]:
    """(container, prefix) of `azblob://CONTAINER/PREFIX?account=NAME`; berth's query options into `options`."""
    rest = own_options(url, _URL_OPTIONS, options, "azblob")
    parts = urlsplit(rest)
    if parts.scheme.lower() != "azblob" or not parts.netloc or parts.query or parts.fragment:
        raise BerthError(f"not an azblob://CONTAINER/PREFIX URL (query options: {', '.join(_URL_OPTIONS)}): {url!r}")
    return parts.netloc, unquote(parts.path)


class Blobs:
    """One container's layout and settings: what the sync and async backends share."""

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        page_size: int = 1000,
        single_put_size: int = 64 * _MiB,
        block_size: int = 16 * _MiB,
        max_name_bytes: int = 1024,
        retry_total: int = 3,
        retry_backoff: float = 0.5,
        connection_timeout: float = 10.0,
        read_timeout: float = 60.0,
    ):
        if not container:
            raise BerthError("azblob:// URL needs a container: azblob://CONTAINER/PREFIX")
        if not 1 <= page_size <= 5000:
            raise BerthError(f"azblob page_size must be 1..5000, got {page_size}")
        if not 1 <= single_put_size <= _MAX_PUT:
            raise BerthError(f"azblob single_put_size must be 1..{_MAX_PUT} bytes, got {single_put_size}")
        if not 1 <= block_size <= _MAX_BLOCK:
            raise BerthError(f"azblob block_size must be 1..{_MAX_BLOCK} bytes, got {block_size}")
        self.container = container
        self.names = ObjectNames("azblob", prefix, max_name_bytes, escaped=True, meta=NAME_META_AZURE)
        self.prefix = self.names.prefix
        self.page_size = page_size
        self.single_put_size = single_put_size
        self.block_size = block_size
        self.attempts = max(1, retry_total + 1)
        self.backoff = retry_backoff
        self.client_options: dict[str, Any] = {
            "connection_timeout": connection_timeout,
            "read_timeout": read_timeout,
            "max_single_put_size": single_put_size,
            "max_block_size": block_size,
        }

    def __repr__(self) -> str:
        return f"'azblob://{self.container}/{self.prefix}'"

    def retry_policy(self, linear_retry: type) -> Any:
        """The client's retry policy (the SDK's default waits 15 s before its first retry)."""
        return linear_retry(backoff=self.backoff, retry_total=self.attempts - 1, random_jitter_range=self.backoff / 2)

    def conditions(self, name: str, if_match: Token | None, if_absent: bool) -> dict[str, Any]:
        """The keyword arguments of a write's condition (`If-Match` / `If-None-Match: *`); {} for none."""
        if if_absent:
            if if_match is not None:
                raise TokenMismatch(f"{name!r} cannot be both absent and at ETag {if_match.value!r}")
            return {"match_condition": MatchConditions.IfMissing}
        if if_match is None:
            return {}
        return {"etag": self.etag(name, if_match), "match_condition": MatchConditions.IfNotModified}

    @staticmethod
    def etag(name: str, token: Token) -> str:
        """The ETag a token holds; a token that holds none (the zero token, another backend's) never matches."""
        value = token.value
        if not isinstance(value, str) or not value:
            raise TokenMismatch(f"{name!r} is not at ETag {value!r}")
        return value

    def chunks(self, data: bytes) -> Iterator[tuple[str, memoryview]]:
        """(block id, bytes) of a frame over the single-put size, staged in order."""
        size = max(self.block_size, -(-len(data) // _MAX_BLOCKS))
        view = memoryview(data)
        cuts = range(0, len(data), size)
        return zip(block_ids(len(cuts)), (view[at : at + size] for at in cuts), strict=True)

    def pause(self, attempt: int) -> float:
        """Seconds to wait before repeating a refused write."""
        return random.uniform(0, min(self.backoff * 2**attempt, 5.0))

    def connection(
        self, account: str | None, account_url: str | None, connection_string: str | None, credential: Any
    ) -> Connection:
        """Where and as whom to connect: the options first, then the environment, as the az CLI reads it."""
        if connection_string:
            return Connection(connection_string, "", None)
        if account_url is None and account:
            account_url = f"https://{account}.blob.core.windows.net"
        if account_url is None:
            from_env = os.environ.get(CONNECTION_STRING_ENV)
            if from_env:
                return Connection(from_env, "", None)
            account = os.environ.get(_ACCOUNT_ENV)
            if not account:
                raise BerthError(
                    f"azblob://{self.container} needs an account: ?account=NAME, account_url=, connection_string=, "
                    f"or {CONNECTION_STRING_ENV} / {_ACCOUNT_ENV} in the environment"
                )
            account_url = f"https://{account}.blob.core.windows.net"
        if credential is None:
            key, sas = os.environ.get(_KEY_ENV), os.environ.get(_SAS_ENV)
            name = account or os.environ.get(_ACCOUNT_ENV)
            if key and name:
                credential = {"account_name": name, "account_key": key}
            elif sas:
                credential = sas
        return Connection(None, account_url, credential)
