"""`berth.aio.open_backend` and `berth.aio.open_store`: an async backend and store for a URL.

The sync `berth.open_store` (`berth._open`) is generated from this module by scripts/twin.py (the
sync backend for a URL is `berth.backends.open_backend`): change this one and run the script.
"""  # twin: sync """`berth.open_store`: a store for a URL (generated from `berth._aio_open`: change that one)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from berth._aio_store import AsyncStore
from berth._core import DEFAULT_MAX_ENVELOPE_BYTES, store_sealer

# twin: sync from berth._public import publish
from berth._sealer import Sealer

# twin: async-only
from berth.backends import async_backend_class, backend_class, creating, credentials_hidden
from berth.backends import open_backend as _open_sync_backend
from berth.backends._aio import DEFAULT_MAX_THREADS, AsyncBackend, ThreadedBackend

# twin: end
# twin: sync from berth.backends import Backend, open_backend

__all__ = ["open_backend", "open_store"]  # twin: sync __all__ = ["open_store"]


# twin: async-only
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


# twin: end
def open_store(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
    clock: Callable[[], datetime] | None = None,
    max_threads: int = DEFAULT_MAX_THREADS,  # twin: async-only
    witness: str | AsyncBackend | None = None,
    **options: Any,
) -> AsyncStore:
    """Open a store by URL: memory://, file:///dir, sqlite:////abs/file.db, postgresql://, redis://, gs://, s3://.

    Args:
        url: where frames live; a scheme whose extra is not installed names the extra.
        identity: the namespace of one agent, tenant or service.
        sealer: None means `PlaintextSealer()`, with a warning once (development only).
        accept_plaintext: let a sealed store read legacy plaintext frames, to `reseal` them.
        max_envelope_bytes: refuse envelopes whose JSON (before sealing) is larger than this;
            the default, 65 MiB, takes a 64 MiB `provider_state` with 1 MiB for the rest.
        clock: returns "now" as an aware datetime (tests inject one).
        witness: a second backend URL (or a backend), ideally in another trust domain, where
            berth records the latest frame of each key and how it left; load and claim then
            refuse a frame that is not the latest, and `audit()` finds deleted, replayed and
            rolled-back frames (docs/store.md, "The witness"). Opened from its own URL, query options
            included (`?synchronous=NORMAL` on a SQLite witness), and `create`: `**options` are the store's.
        **options: passed to the backend (`berth.aio`'s open also takes `max_threads`: the worker
            threads of a backend whose client blocks); `create=False` (any scheme) opens only a store that
            exists, its witness too: where a backend would create its storage (a directory, a
            database file, a table) it raises `BackendError` instead, creating nothing
            (PostgreSQL at the first call, which is when it looks).

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    sealer = store_sealer(url, identity, sealer)
    create = options.get("create", True)  # a witness opened with create=False creates nothing either
    # twin: sync witness_backend = open_backend(witness, create=create) if isinstance(witness, str) else witness
    # twin: async-only
    witness_backend = (
        open_backend(witness, max_threads=max_threads, create=create) if isinstance(witness, str) else witness
    )
    # twin: end
    backend = open_backend(url, max_threads=max_threads, **options)  # twin: sync backend = open_backend(url, **options)
    return AsyncStore(
        backend,
        identity=identity,
        sealer=sealer,
        accept_plaintext=accept_plaintext,
        max_envelope_bytes=max_envelope_bytes,
        clock=clock,
        witness=witness_backend,
    )


# twin: sync publish(globals())  # its public names read as berth.X
