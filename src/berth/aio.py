"""`berth.aio`: the same store, questions and coordinator, awaited -- for asyncio hosts.

Every host-facing call has an awaitable twin with the same name, semantics and
errors::

    store = berth.aio.open_store("postgresql://...", identity="pr-bot", sealer=sealer)
    await store.save("org/repo#42", envelope)
    envelope = await store.claim("org/repo#42")   # exactly one caller gets it
    async for listing in store.list("org/"):
        ...
    await store.aclose()

One implementation of the contract serves both APIs: an `AsyncStore` runs the
sync `Store`'s own checks, codec, sealing and error mapping around an awaited
backend call, and the multi-step protocols (claim, suspend, wake, the question
store's compare-and-swap) are plans both drive. PostgreSQL (psycopg's
AsyncConnection) and Redis (`redis.asyncio`) are async natively; SQLite, the
file system, GCS and S3 -- whose official clients block -- run in a bounded
pool of worker threads (`max_threads`, default 8). See docs/store.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from berth._aio_questions import AsyncQuestionStore, Coordinator
from berth._aio_store import OFF_LOOP_BYTES, AsyncStore
from berth._keys import validate_identity
from berth._notify import Webhook, as_webhook
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, store_sealer
from berth.backends import async_backend_class, credentials_hidden
from berth.backends import open_backend as _open_sync_backend
from berth.backends._aio import DEFAULT_MAX_THREADS, AsyncBackend, ThreadedBackend

__all__ = [
    "DEFAULT_MAX_THREADS",
    "OFF_LOOP_BYTES",
    "AsyncBackend",
    "AsyncQuestionStore",
    "AsyncStore",
    "Coordinator",
    "ThreadedBackend",
    "open_backend",
    "open_questions",
    "open_store",
]


def open_backend(url: str, *, max_threads: int = DEFAULT_MAX_THREADS, **options: Any) -> AsyncBackend:
    """The async backend for `url`: native for postgresql:// and redis://, else the sync one in threads.

    Args:
        url: as for `berth.open_store`.
        max_threads: worker threads of a threaded backend (its bound on concurrent calls).
        **options: passed to the backend.
    """
    native = async_backend_class(url)
    if native is not None:
        with credentials_hidden(url):
            backend: AsyncBackend = native.from_url(url, **options)
        return backend
    return ThreadedBackend(_open_sync_backend(url, **options), max_threads=max_threads)


def open_store(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
    clock: Callable[[], datetime] | None = None,
    max_threads: int = DEFAULT_MAX_THREADS,
    witness: str | AsyncBackend | None = None,
    **options: Any,
) -> AsyncStore:
    """Open an `AsyncStore` by URL; arguments as `berth.open_store`, plus `max_threads`.

    Opening makes no connection on PostgreSQL and Redis; SQLite and the file backend
    create their file or directory here (as the sync open does). `witness` is a second
    backend URL, as for `berth.open_store`, awaited the same way.

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    sealer = store_sealer(url, identity, sealer)
    witness_backend = open_backend(witness, max_threads=max_threads) if isinstance(witness, str) else witness
    backend = open_backend(url, max_threads=max_threads, **options)
    return AsyncStore(
        backend,
        identity=identity,
        sealer=sealer,
        accept_plaintext=accept_plaintext,
        max_envelope_bytes=max_envelope_bytes,
        clock=clock,
        witness=witness_backend,
    )


def open_questions(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    clock: Callable[[], datetime] | None = None,
    max_threads: int = DEFAULT_MAX_THREADS,
    notify: Webhook | None = None,
    **options: Any,
) -> AsyncQuestionStore:
    """Open an `AsyncQuestionStore` by URL; arguments as `berth.open_questions`, plus `max_threads`.

    `notify` (a `berth.Webhook`) is told of every question asked and answer given: queued, and sent by
    the webhook's own threads, so an awaited `ask` never waits on the receiver.

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        TypeError: `notify` is not a `berth.Webhook` (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    validate_identity(identity)
    as_webhook(notify)
    backend = open_backend(url, max_threads=max_threads, **options)
    return AsyncQuestionStore(
        backend, identity=identity, sealer=sealer, accept_plaintext=accept_plaintext, clock=clock, notify=notify
    )
