"""What both of the savers' I/O shells call, sync (the async one in a worker thread, over its store's sync
twin): the witness's check of what a read did not see (the witness's key listing is sync)."""

from __future__ import annotations

from berth._store import Store

__all__ = ["refuse_unseen"]


def refuse_unseen(store: Store, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
    """With a witness: raise `IntegrityError` for a frame under `prefix`, sorting after `after` (and before
    `before`), that a read did not find and the witness saw parked and never leave (deleted behind berth's back).

    Each key the witness knows there that the read did not see is loaded: one that left (a
    claim, a delete, a sweep) or landed meanwhile passes; a missing one is refused by the load.
    """
    for key in store.frames.keys_after(prefix, after):  # none without a witness
        if key not in seen and (before is None or key < before):
            store.load(key, allow_expired=True)
