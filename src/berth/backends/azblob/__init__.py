"""`azblob://CONTAINER/PREFIX`: frames as Azure Blob Storage block blobs; the ETag is the token.

A save uploads the frame as one block blob (or, over `single_put_size`, as blocks staged
under fresh ids and committed at once, so a torn frame is never visible); every write to a
blob gives it a new ETag, so a token loaded before a re-save never matches again. Deletes
and conditional writes send `If-Match: <etag>`, creates `If-None-Match: *`; a 412, a 409
`BlobAlreadyExists` or a 404 on a conditional call is `TokenMismatch`, unless the client
retried the call after a transient error (then the outcome is unknown: `BackendError`, never
a lost claim). Unconditional saves are repeated only when the service never applied them.
A missing container is `StoreMissing`; `setup()` creates it.

Connections: `?account=NAME` or `account_url=` with a credential (given, `AZURE_STORAGE_KEY`,
`AZURE_STORAGE_SAS_TOKEN`, else azure-identity's `DefaultAzureCredential`), or a connection
string (`connection_string=`, `AZURE_STORAGE_CONNECTION_STRING`): docs/backends/azblob.md.
"""

from __future__ import annotations

from berth.backends.azblob._aio_backend import AsyncAzureBlobBackend
from berth.backends.azblob._backend import AzureBlobBackend

__all__ = ["AsyncAzureBlobBackend", "AzureBlobBackend"]
