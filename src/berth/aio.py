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

from berth._aio_coordinator import AsyncCoordinator, Coordinator
from berth._aio_open import open_backend
from berth._aio_questions import AsyncQuestionStore, open_questions
from berth._aio_store import OFF_LOOP_BYTES, AsyncStore
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, store_sealer
from berth.backends._aio import DEFAULT_MAX_THREADS, AsyncBackend, ThreadedBackend

__all__ = [
    "DEFAULT_MAX_THREADS",
    "OFF_LOOP_BYTES",
    "AsyncBackend",
    "AsyncCoordinator",
    "AsyncQuestionStore",
    "AsyncStore",
    "Coordinator",
    "ThreadedBackend",
    "open_backend",
    "open_questions",
    "open_store",
]


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
    create = options.get("create", True)  # a witness opened with create=False creates nothing either
    witness_backend = (
        open_backend(witness, max_threads=max_threads, create=create) if isinstance(witness, str) else witness
    )
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
