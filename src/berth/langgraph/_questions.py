"""What the savers' I/O shells call: the witness's check of what a read did not see (sync and awaited)."""

from __future__ import annotations

from berth._aio_store import AsyncStore
from berth._store import Store

__all__ = ["arefuse_unseen", "refuse_unseen"]


def refuse_unseen(store: Store, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
    """With a witness: raise `IntegrityError` for a frame under `prefix`, sorting after `after` (and before
    `before`), that a read did not find and the witness saw parked and never leave (deleted behind berth's back).

    Each key the witness knows there that the read did not see is loaded: one that left (a
    claim, a delete, a sweep) or landed meanwhile passes; a missing one is refused by the load.
    """
    for key in store.frames.keys_after(prefix, after):  # none without a witness
        if key not in seen and (before is None or key < before):
            store.load(key, allow_expired=True)


async def arefuse_unseen(
    store: AsyncStore, prefix: str, after: str, seen: frozenset[str], before: str | None = None
) -> None:
    """`refuse_unseen` over an `AsyncStore`: the witness's listing and each load awaited, on the loop."""
    if store.frames.records is None:  # no witness: no listing (every async saver read passes here)
        return
    async for key in store.frames.akeys_after(prefix, after):  # none without a witness
        if key not in seen and (before is None or key < before):
            await store.load(key, allow_expired=True)
