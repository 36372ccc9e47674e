# generated from src/berth/backends/azblob/_aio_backend.py by scripts/twin.py — do not edit: change the source and run the script
"""`AzureBlobBackend`: frames as block blobs, on azure-storage-blob's sync client.

Its sync twin (`_backend.py`) is generated from the async module by `scripts/twin.py`: the same
calls, awaited or not. What both share without I/O is `_wire.Blobs`.
"""

from __future__ import annotations

import importlib
import io
import time
from collections.abc import Iterator
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobBlock, ContainerClient, ContentSettings, LinearRetry

from berth._errors import BackendError, BerthError
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Head, sorted_names
from berth.backends.azblob._wire import (
    ERRORS,
    Attempts,
    Blobs,
    absent,
    changed_mid_read,
    full_size,
    invalid_block_list,
    parse_url,
    refused_unapplied,
)

__all__ = ["AzureBlobBackend"]

_OCTETS = ContentSettings(content_type="application/octet-stream")
_READS = 3  # a read repeated when the blob changed between its ranges
_COMMITS = 8  # a staged upload repeated when another writer's commit discarded its blocks
_IDENTITY = "azure.identity"
# aiohttp warns (ResourceWarning) that a body of raw bytes over 1 MiB may block the event loop; the
# async backend sends a larger frame as blocks, each from a stream


class AzureBlobBackend(Backend):
    """Frames as block blobs `{prefix}/{identity}/{key}` in one Azure Blob Storage container; the ETag is the token.

    A save is one Put Blob, or for a frame over `single_put_size` blocks staged under fresh
    random ids and one Put Block List: the blob changes only at that commit, all at once, so a
    torn frame is never visible. Conditional writes and deletes send `If-Match: <etag>`, creates
    `If-None-Match: *`, on the commit. Listing is `List Blobs` by prefix, a page at a time.
    """

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        client: Any = None,
        account: str | None = None,
        account_url: str | None = None,
        connection_string: str | None = None,
        credential: Any = None,
        **settings: Any,
    ):
        """Open a container (see docs/backends/azblob.md).

        Args:
            container: the container; opening never creates it (`setup()` does).
            prefix: blob names start with `{prefix}/`; empty for the container's root.
            client: a ready `ContainerClient` for this container (then the connection options are ignored).
            account: the storage account: `https://{account}.blob.core.windows.net`.
            account_url: the account's blob endpoint (an emulator's, a sovereign cloud's).
            connection_string: default `AZURE_STORAGE_CONNECTION_STRING` when no account is named.
            credential: any credential the client takes; default: `AZURE_STORAGE_KEY` or
                `AZURE_STORAGE_SAS_TOKEN`, else azure-identity's `DefaultAzureCredential`.
            **settings: `page_size`, `single_put_size`, `block_size`, `max_name_bytes`,
                `retry_total`, `retry_backoff`, `connection_timeout`, `read_timeout` (`_wire.Blobs`).

        Raises:
            BerthError: a bad option, or no account to connect to.
        """
        self.blobs = Blobs(container, prefix, **settings)
        self.container = container
        self.prefix = self.blobs.prefix
        self._credential: Any = None
        self._owned = client is None
        if client is None:
            where = self.blobs.connection(account, account_url, connection_string, credential)
            options = dict(self.blobs.client_options, retry_policy=self.blobs.retry_policy(LinearRetry))
            if where.connection_string:
                client = ContainerClient.from_connection_string(where.connection_string, container, **options)
            else:
                given = where.credential
                if given is None:
                    given = self._credential = _default_credential()
                client = ContainerClient(where.account_url, container, credential=given, **options)
        self._client = client

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AzureBlobBackend:
        """Open `azblob://CONTAINER/PREFIX` (query: `account`, `account_url` and the settings; options as
        for the constructor, a keyword winning over the query)."""
        container, prefix = parse_url(url, options)
        return cls(container, prefix, **options)

    def __repr__(self) -> str:
        return f"AzureBlobBackend({self.blobs!r})"

    # --- the seam ---------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new ETag.

        Raises:
            TokenMismatch: the condition did not hold.
            BackendError: the service failed (a failed save leaves the previous blob).
        """
        conditions = self.blobs.conditions(name, if_match, if_absent)
        obj, hashed = self.blobs.names.object(name)
        blob = self._client.get_blob_client(obj)
        metadata = self.blobs.names.metadata(name) if hashed else None
        body = bytes(data)
        single = self.blobs.single_put_size
        for attempt in range(self.blobs.attempts):
            # A conditional write is retried by the client (a retried one that then finds its
            # condition gone is an unknown outcome, never a lost race); an unconditional one is
            # repeated only when the service never applied it: a retry after an ambiguous failure
            # could re-create an envelope that a waker claimed between the two attempts.
            attempts = Attempts()
            retry: dict[str, Any] = {"retry_hook": attempts} if conditions else {"retry_total": 0}
            try:
                if len(body) <= single:
                    done = blob.upload_blob(
                        body,
                        overwrite=True,
                        metadata=metadata,
                        content_settings=_OCTETS,
                        **conditions,
                        **retry,
                    )
                else:
                    done = self._staged(blob, body, metadata, conditions, retry)
            except ERRORS.catches as exc:
                if not conditions and refused_unapplied(exc) and attempt + 1 < self.blobs.attempts:
                    time.sleep(self.blobs.pause(attempt))
                    continue
                raise ERRORS.error(exc, "put", name, conditional=bool(conditions), retried=attempts.retried) from exc
            return Token(str(done["etag"]))
        raise AssertionError("unreachable")  # pragma: no cover

    def _staged(
        self, blob: Any, body: bytes, metadata: dict[str, str] | None, conditions: dict[str, Any], retry: dict[str, Any]
    ) -> Any:
        """A frame over the single-put size: blocks staged under fresh ids, then one commit, conditional if asked.

        Until the commit the blob is what it was (or absent); uncommitted blocks are never read, and
        the service drops them after a week.
        """
        for attempt in range(_COMMITS):
            if attempt:  # another writer's commit discarded this one's blocks: stage them again, a moment later
                time.sleep(self.blobs.pause(attempt))
            blocks = []
            for block_id, chunk in self.blobs.chunks(body):
                blob.stage_block(block_id, io.BytesIO(chunk), length=len(chunk))
                blocks.append(BlobBlock(block_id=block_id))
            try:
                return blob.commit_block_list(
                    blocks, metadata=metadata, content_settings=_OCTETS, **conditions, **retry
                )
            except ERRORS.catches as exc:
                if not invalid_block_list(exc):
                    raise
        raise BackendError(f"azblob could not commit {blob.blob_name!r}: its blocks were discarded {_COMMITS} times")

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The frame under `name` and its ETag, or None.

        Raises:
            StoreMissing: the container does not exist.
            BackendError: the service failed.
        """
        blob = self._client.get_blob_client(self.blobs.names.object(name)[0])
        for attempt in range(_READS):
            try:
                downloader = blob.download_blob()
                data = downloader.readall()
            except ERRORS.catches as exc:
                if absent(exc):
                    return None
                if changed_mid_read(exc) and attempt + 1 < _READS:
                    continue
                raise ERRORS.error(exc, "get", name) from exc
            return data, Token(str(downloader.properties.etag))
        raise AssertionError("unreachable")  # pragma: no cover

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its ETag (a listing's long header)."""
        found = self._head(self.blobs.names.object(name)[0], name, size)
        return None if found is None else (found[0], found[1])

    def _head(self, obj: str, name: str, size: int) -> tuple[bytes, Token, int] | None:
        blob = self._client.get_blob_client(obj)
        try:
            downloader = blob.download_blob(offset=0, length=max(size, 1))
            data = downloader.readall()
        except ERRORS.catches as exc:
            if absent(exc):
                return None
            raise ERRORS.error(exc, "read", name) from exc
        return data[:size], Token(str(downloader.properties.etag)), full_size(downloader, len(data))

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its ETag is `token`.

        Raises:
            TokenMismatch: the blob changed, is gone, or never existed.
            BackendError: the service failed, or a retried delete's outcome is unknown.
        """
        etag = self.blobs.etag(name, token)
        blob = self._client.get_blob_client(self.blobs.names.object(name)[0])
        attempts = Attempts()
        try:
            blob.delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified, retry_hook=attempts)
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "delete", name, conditional=True, retried=attempts.retried) from exc

    def _listed(self, prefix: str) -> Iterator[tuple[str, Any]]:
        """(name, the listing's blob properties) of every frame under `prefix`, a page at a time."""
        pages = self._client.list_blobs(
            name_starts_with=self.blobs.names.query_prefix(prefix),
            include=["metadata"],
            results_per_page=self.blobs.page_size,
        ).by_page()
        while True:
            try:
                page = next(pages, None)
                items = [] if page is None else [item for item in page]
            except ERRORS.catches as exc:
                raise ERRORS.error(exc, "list", prefix) from exc
            if page is None:
                return
            for item in items:
                name = self.blobs.names.name_of(item.name, item.metadata)
                if name is not None and name.startswith(prefix):
                    yield name, item

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name under `prefix`, one `List Blobs` page at a time."""
        for name, _ in self._listed(prefix):
            yield name

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, ETag, full size) under `prefix`, by ranged reads."""
        return self._heads_of(self._listed(prefix), size)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order: the listing (names only) ordered in memory -- O(limit) with a
        limit, else O(names) -- then one ranged read per head."""
        return self._heads_of(self._sorted(prefix, limit, reverse), size)

    def _sorted(self, prefix: str, limit: int | None, reverse: bool) -> Iterator[tuple[str, Any]]:
        for item in sorted_names([item for item in self._listed(prefix)], limit, reverse):  # noqa: UP028
            yield item

    def _heads_of(self, listed: Iterator[tuple[str, Any]], size: int) -> Iterator[Head]:
        for name, item in listed:
            full = int(item.size or 0)
            if full == 0 or size <= 0:
                yield name, b"", Token(str(item.etag)), full
                continue
            found = self._head(item.name, name, size)
            if found is not None:  # else deleted since the listing
                yield name, found[0], found[1], found[2]

    def setup(self) -> None:
        """Create the container if it does not exist (idempotent); opening a store never creates it.

        Raises:
            BackendError: the service refused (the credential may not create containers).
        """
        try:
            self._client.create_container()
        except ResourceExistsError:
            return
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "create the container for", self.blobs.prefix or "/") from exc

    def close(self) -> None:
        """Close the client and credential berth built (a client given is left open), and an async one's sync twin."""
        if self._owned:
            self._owned = False
            self._client.close()
            if self._credential is not None:
                self._credential.close()


def _default_credential() -> Any:
    """azure-identity's `DefaultAzureCredential` (environment, workload or managed identity, the az CLI)."""
    try:
        module = importlib.import_module(_IDENTITY)
    except ImportError:
        raise BerthError(
            "azblob:// found no credential (connection string, AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN, "
            "or credential=): install azure-identity to use DefaultAzureCredential"
        ) from None
    return module.DefaultAzureCredential()
