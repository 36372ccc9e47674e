"""`berth.aio`: the same store, questions and coordinator, awaited -- for asyncio hosts.

Every host-facing call has an awaitable twin with the same name, semantics and
errors::

    store = berth.aio.open_store("postgresql://...", identity="pr-bot", sealer=sealer)
    await store.save("org/repo#42", envelope)
    envelope = await store.claim("org/repo#42")   # exactly one caller gets it
    async for listing in store.list("org/"):
        ...
    await store.aclose()

One implementation of the contract serves both APIs: an `AsyncStore` holds the
same core as a `Store` (checks, codec, sealing, error mapping; the sync shell is
generated from the async one), and the multi-step protocols (claim, suspend, wake, the question
store's compare-and-swap) are plans both drive. PostgreSQL (psycopg's
AsyncConnection) and Redis (`redis.asyncio`) are async natively; SQLite, the
file system, GCS and S3 -- whose official clients block -- run in a bounded
pool of worker threads (`max_threads`, default 8). See docs/store.md.
"""

from __future__ import annotations

from berth._aio_coordinator import AsyncCoordinator, Coordinator
from berth._aio_open import open_backend, open_store
from berth._aio_questions import AsyncQuestionStore, open_questions
from berth._aio_store import OFF_LOOP_BYTES, AsyncStore
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
