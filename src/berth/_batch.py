"""`save_many`: its items and outcomes (`SaveItem`, `SaveResult`), checked before any I/O, in chunks.

A batch is checked whole before its first write (keys, envelopes, conditions, a key twice), then
written a chunk at a time: each chunk's frames sealed, then one `Backend.put_many` (one transaction
on SQLite and PostgreSQL, one pipeline on Redis). The frames strategies (`berth._frames`,
`berth._witnessed`) run these pieces as plans; the shells only check and run them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from berth._core import StoreCore
from berth._envelope import Envelope
from berth._errors import BerthError, EnvelopeTooLarge, InvalidEnvelope, InvalidKey, TokenMismatch
from berth._public import publish
from berth._token import Token
from berth.backends import Put

__all__ = ["BATCH_BYTES", "SaveItem", "SaveResult", "built", "checked", "chunks", "outcomes"]

BATCH_BYTES = 32 * 1024 * 1024
"""A chunk ends early once its states hold this many bytes, so a batch of large states is never held sealed whole."""
_ITEM_BYTES = 1024  # what sealing an item costs beyond its state, in bytes (decides when async sealing leaves the loop)


class SaveItem(NamedTuple):
    """One save of `Store.save_many`: `save(key, envelope, if_absent=..., if_match=...)`'s arguments.

    A plain `(key, envelope)` pair is an unconditional save.
    """

    key: str
    envelope: Envelope
    if_absent: bool = False
    if_match: Token | None = None


class SaveResult(NamedTuple):
    """What one item of `Store.save_many` came to: saved (`token`), or not (`error`, and `token` None)."""

    key: str
    token: Token | None
    """The token of the envelope now parked under `key`; None when this item wrote nothing."""
    error: BerthError | None = None
    """None when saved; else why nothing was written for this item: `TokenMismatch` (its `if_absent`
    or `if_match` did not hold) or `EnvelopeTooLarge` (found when it was sealed)."""

    @property
    def ok(self) -> bool:
        """Whether this item was saved."""
        return self.error is None


def checked(core: StoreCore, items: Iterable[SaveItem | tuple[str, Envelope]]) -> list[SaveItem]:
    """The items as `SaveItem`s, every one checked as `save` checks its arguments, before any I/O.

    Raises `InvalidKey` (a key breaking the key rules, or one key twice: which write should win is
    not the store's to guess), `InvalidEnvelope`, or `TokenMismatch` for a condition that can never hold.
    """
    if isinstance(items, (str, bytes, SaveItem)):
        raise InvalidEnvelope(
            f"save_many takes a sequence of items, not {type(items).__name__}", identity=core.identity
        )
    out: list[SaveItem] = []
    seen: dict[str, int] = {}
    for at, item in enumerate(items):
        if type(item) is not SaveItem:
            if not isinstance(item, tuple) or not 2 <= len(item) <= 4:
                raise InvalidEnvelope(
                    f"save_many item {at} for identity {core.identity!r} is not a SaveItem or a (key, envelope) "
                    f"pair (a {type(item).__name__})",
                    identity=core.identity,
                )
            item = SaveItem(*item)
        key = item.key
        core.name(key)
        core.check_envelope(key, item.envelope)
        core.check_condition(key, item.if_absent, item.if_match)
        first = seen.setdefault(key, at)
        if first != at:
            raise InvalidKey(
                f"save_many has key {key!r} of identity {core.identity!r} twice (items {first} and {at}): "
                "one save per key in a batch",
                identity=core.identity,
                key=key,
            )
        out.append(item)
    return out


def chunks(core: StoreCore, items: Sequence[SaveItem]) -> Iterator[tuple[list[SaveItem], int]]:
    """The items a chunk at a time (at most `core.save_batch`, states of about `BATCH_BYTES`), each with
    what sealing it costs in bytes."""
    chunk: list[SaveItem] = []
    size = 0
    for item in items:
        chunk.append(item)
        size += core.state_size(item.envelope) + _ITEM_BYTES
        if len(chunk) >= core.save_batch or size >= BATCH_BYTES:
            yield chunk, size
            chunk, size = [], 0
    if chunk:
        yield chunk, size


def built(core: StoreCore, chunk: Sequence[SaveItem]) -> tuple[list[bytes | EnvelopeTooLarge], list[Put]]:
    """Each item's frame (or the `EnvelopeTooLarge` sealing it raised), and the puts of those that sealed."""
    frames: list[bytes | EnvelopeTooLarge] = []
    puts: list[Put] = []
    for key, envelope, if_absent, if_match in chunk:
        try:
            frame = core.build(key, envelope)
        except EnvelopeTooLarge as exc:
            frames.append(exc)
            continue
        frames.append(frame)
        puts.append(Put(core.name(key), frame, if_match, if_absent))
    return frames, puts


def outcomes(
    core: StoreCore,
    chunk: Sequence[SaveItem],
    frames: Sequence[bytes | EnvelopeTooLarge],
    written: Sequence[Token | TokenMismatch],
) -> list[SaveResult]:
    """Each item's `SaveResult`, from what sealing it gave (`frames`) and what its put did (`written`),
    a failed condition named by identity and key as `save` names it."""
    results = iter(written)
    out = []
    for item, frame in zip(chunk, frames, strict=True):
        if isinstance(frame, EnvelopeTooLarge):
            out.append(SaveResult(item.key, None, frame))
            continue
        done = next(results)
        if isinstance(done, Token):
            out.append(SaveResult(item.key, done))
        else:
            out.append(SaveResult(item.key, None, core.error(done, item.key, "save")))
    return out


publish(globals())  # its public names read as berth.X
