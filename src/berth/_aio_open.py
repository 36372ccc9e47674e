"""`berth.aio.open_backend`: the async backend for a URL (native where the official client is async)."""

from __future__ import annotations

from typing import Any

from berth.backends import async_backend_class, backend_class, creating, credentials_hidden
from berth.backends import open_backend as _open_sync_backend
from berth.backends._aio import DEFAULT_MAX_THREADS, AsyncBackend, ThreadedBackend

__all__ = ["open_backend"]


def open_backend(url: str, *, max_threads: int = DEFAULT_MAX_THREADS, **options: Any) -> AsyncBackend:
    """The async backend for `url`: native for postgresql:// and redis://, else the sync one in threads.

    Args:
        url: as for `berth.open_store`.
        max_threads: worker threads of a threaded backend (its bound on concurrent calls).
        **options: passed to the backend (`create=False`: as for `berth.backends.open_backend`).
    """
    native = async_backend_class(url)
    if native is not None:
        with credentials_hidden(url):
            backend: AsyncBackend = native.from_url(url, **creating(backend_class(url), options))
        return backend
    return ThreadedBackend(_open_sync_backend(url, **options), max_threads=max_threads)
