"""`AsyncStore`, awaited: the store's shell, and the source of the sync `berth.Store` (`berth._store`).

A shell checks arguments (before any I/O) and runs plans: its frames strategy's (`berth._frames`,
`berth._witnessed`: chosen at open, plain or witnessed) and its core's (`berth._core.StoreCore`: key
rules, save conditions, codec, sealing, expiry, every error's message). Enumerations stream the
backend's headers and run a plan per row. scripts/twin.py generates the sync shell from this module
(change this one and run it), where save, load and a claim's two steps run through the strategy's
`hot_path` (plain frames: straight-line, `berth._frames.PlainHotPath`), the rest by `berth._plan.run`.

Awaited (`berth._plan.arun`), sealing or opening `OFF_LOOP_BYTES` or more (a `save_many` chunk too) runs
in a worker thread: a 64 MiB state never holds the loop for the tens of milliseconds AES-GCM and the
codec take; an enumeration lets the loop run other tasks every 64 rows.
"""  # twin: sync """`Store`: the store's sync shell (generated from `berth._aio_store`, which says how it works)."""

from __future__ import annotations

import asyncio  # twin: async-only
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from berth._batch import SaveItem, SaveResult, checked
from berth._codec import Header
from berth._core import (
    DEFAULT_MAX_ENVELOPE_BYTES,
    Listing,
    Parked,
    ResealReport,
    StoreCore,
    StoreSteps,
    Unreadable,
    warn_plaintext,
)
from berth._envelope import Envelope
from berth._frames import AsyncIO, FrameIO
from berth._observe import instrument
from berth._plaintext import PlaintextSealer
from berth._plan import OFF_LOOP_BYTES, Cpu, arun, in_pieces  # twin: sync from berth._plan import INLINE, Cpu, run

# twin: sync from berth._core import PlaintextWarning, store_sealer
# twin: sync from berth._public import publish
from berth._sealer import Sealer
from berth._store import Store  # twin: async-only
from berth._token import Token
from berth._witness import AuditReport
from berth._witnessed import Frames, frames_for
from berth.backends._aio import AsyncBackend, sync_twin  # twin: async-only

# twin: sync from berth.backends import Backend, as_backend

__all__ = ["OFF_LOOP_BYTES", "AsyncStore"]  # twin: async-only
# twin: sync __all__ = ["DEFAULT_MAX_ENVELOPE_BYTES", "Listing", "Parked", "PlaintextWarning", "ResealReport",
# twin: sync "Store", "StoreCore", "StoreSteps", "store_sealer"]

# twin: async-only
_ROWS_PER_STEP = 64  # an enumeration lets the loop run other tasks after this many rows (~1 ms of headers)
_DELETE_BATCH = 128  # frames per delete_many of delete_prefix (the sync store's 500 took ~10 ms of one loop step)


class _OffLoop:
    """`berth._plan.Cpu` under `arun`: large work in a worker thread, off the event loop."""

    @staticmethod
    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(in_pieces, fn, *args)


_OFF_LOOP = _OffLoop()
# twin: end


class AsyncStore:
    """Parks sealed envelopes under keys of one identity, in one backend.

    Open one with `berth.aio.open_store(url, ...)`, or wrap a backend of your own:
    `AsyncStore(backend, identity="pr-bot", sealer=...)`. Safe to share between threads (`berth.aio`'s:
    between the tasks of one event loop); its backend, between processes.
    """

    def __init__(
        self,
        backend: AsyncBackend,
        *,
        identity: str,
        sealer: Sealer | None = None,
        accept_plaintext: bool = False,
        max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        clock: Callable[[], datetime] | None = None,
        witness: AsyncBackend | None = None,
        namespace: str | None = None,
    ):
        """Wrap an async backend (and `witness`); `.sync`: a `berth.Store` over their sync twins."""  # twin: async-only
        if sealer is None:
            warn_plaintext(f"for identity {identity!r}")
            sealer = PlaintextSealer()
        self.core = StoreCore(
            identity=identity,
            sealer=sealer,
            accept_plaintext=accept_plaintext,
            max_envelope_bytes=max_envelope_bytes,
            clock=clock,
            namespace=namespace,
        )
        """Every decision this store makes that is not I/O (the one class both shells hold)."""
        # twin: async-only
        self._opened: dict[str, Any] = {"identity": identity, "namespace": namespace, "clock": clock}
        self._opened |= {"accept_plaintext": accept_plaintext, "max_envelope_bytes": max_envelope_bytes}
        self._sync: Store | None = None
        # twin: end
        self.backend = backend  # twin: sync self.backend = as_backend(backend)
        # twin: sync witness = None if witness is None else as_backend(witness)
        self.frames: Frames = frames_for(self.core, witness)
        """How this store writes and reads frames, chosen here once: plainly, or through a witness."""
        self._io = {FrameIO: AsyncIO(records=self.frames.records, owner=self), Cpu: _OFF_LOOP}  # twin: async-only
        # twin: sync self._io = {FrameIO: SyncIO(records=self.frames.records, owner=self), Cpu: INLINE}
        # twin: sync self._hot = self.frames.hot_path(self, self._io)
        instrument(self, "store", identity=self.core.identity, backend=self.backend)  # before steps bind them
        self.steps = _Steps(self)  # twin: async-only
        # twin: sync self.steps: StoreSteps = _Steps(self)
        """This store playing `StoreSteps` in plans (a claim's, a coordinator's, the question store's)."""
        self._claiming = {StoreSteps: self.steps}

    @property
    def identity(self) -> str:
        """The namespace of this store (`pr-bot`; a question store's frames: `pr-bot:questions`)."""
        return self.core.identity

    @property
    def max_envelope_bytes(self) -> int:
        """Envelopes larger than this once encoded are refused (`EnvelopeTooLarge`)."""
        return self.core.max_envelope_bytes

    @property
    def sealer(self) -> Sealer:
        """What seals new frames and opens parked ones; fixed at open (read-only)."""
        return self.core.sealer

    @property
    def accept_plaintext(self) -> bool:
        """Whether this sealed store reads legacy plaintext frames (to `reseal` them); fixed at open."""
        return self.core.accept_plaintext

    # twin: async-only
    @property
    def sync(self) -> Store:
        """The sync `Store` over the same backends and sealer (for code that is not async), made on first use."""
        if self._sync is None:
            records = self.frames.records
            self._sync = Store(
                sync_twin(self.backend),
                sealer=self.core.sealer,
                witness=None if records is None else sync_twin(records),
                **self._opened,
            )
        return self._sync

    # twin: end
    def __repr__(self) -> str:
        return f"AsyncStore({self.backend!r}, identity={self.identity!r}, sealer={self.sealer!r})"  # twin: async-only
        # twin: sync return f"Store({type(self.backend).__name__}, identity={self.identity!r}, sealer={self.sealer!r})"

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the backend's connections (and the witness's)."""
        await self.backend.aclose()
        if self.frames.records is not None:
            await self.frames.records.aclose()

    async def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent); backends that need none do nothing.

        Backends with a schema (PostgreSQL) also run it lazily on first use; call it at deploy
        time to fail early, or with a role that may create tables.

        Raises:
            BackendError: the migration failed.
        """
        try:
            await self.backend.setup()
        except Exception as exc:
            self.core.reraise(exc, "*", "setup")

    def now(self) -> datetime:
        """The store's clock (injectable for tests)."""
        return self.core.clock()

    def check_key(self, key: str) -> str:
        """Return `key` if this store accepts it (the key rules of docs/contract.md); no I/O.

        Raises:
            InvalidKey: the key breaks a rule; the message names the rule.
        """
        return self.core.check_key(key)

    async def save(
        self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None
    ) -> Token:
        """Seal and park `envelope` under `key`, superseding whatever was parked there.

        Unconditional by default (last save wins, and it never raises `TokenMismatch`).
        Hosts that need first-writer-wins or compare-and-set pass `if_absent=True` or
        `if_match=token`: a condition that does not hold writes nothing.

        Args:
            key: the suspension's name within this identity.
            envelope: what to park; `created_at` is stamped now when absent.
            if_absent: write only if nothing is parked under `key`.
            if_match: write only if what is parked under `key` is still at this token
                (from `load`, `list` or an earlier `save`).

        Returns:
            The token of the envelope now parked (it can delete it, or be the next `if_match`).

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            InvalidEnvelope: not an Envelope, or a version this berth does not park.
            EnvelopeTooLarge: the envelope's JSON (provider_state, loop_state, calls, labels and the
                other fields, before sealing) exceeds `max_envelope_bytes`.
            TokenMismatch: `if_absent` and something is parked, or `if_match` and the token is
                stale, zero, or nothing is parked; nothing was written.
            BackendError: the write failed; the previous envelope, if any, is intact.
        """
        self.core.name(key)
        self.core.check_condition(key, if_absent, if_match)
        return await arun(self.frames.save(key, envelope, if_absent, if_match), self._io)  # twin: async-only
        # twin: sync return self._hot.save(key, envelope, if_absent, if_match)

    async def save_many(self, items: Iterable[SaveItem | tuple[str, Envelope]]) -> list[SaveResult]:
        """`save` of many envelopes at once: one transaction or round trip per 500 where the backend
        can (SQLite, PostgreSQL, Redis), one `put` each elsewhere; each item's outcome reported.

        Each item is a `SaveItem(key, envelope, if_absent=False, if_match=None)` or a plain
        `(key, envelope)` pair (unconditional). A condition that does not hold writes nothing for
        its item and is reported in its `SaveResult`, never raised: the other items are written all
        the same. Every item is checked before any I/O, and a bad one refuses the whole batch. With a
        witness, one witnessed save per item (each with `save`'s crash guarantee), none batched.

        Args:
            items: what to save, keys distinct (which of two saves of one key should win is not the
                store's to guess).

        Returns:
            One `SaveResult(key, token, error)` per item, in order: `token` the new token of a saved
            item; `error` (and no token) an item not saved: `TokenMismatch` (`if_absent` and something
            is parked, or `if_match` and the token is stale) or `EnvelopeTooLarge` (found as it was sealed).

        Raises:
            InvalidKey: a key breaks the key rules, or is in the batch twice (before any I/O).
            InvalidEnvelope: an item is not a `SaveItem` or a pair, or its envelope not an Envelope
                of this version (before any I/O).
            TokenMismatch: an item's condition can never hold (the zero token, `if_absent` with
                `if_match`; before any I/O).
            BackendError: the write of a chunk failed; the chunks before it were written (their
                outcomes are lost with the call), that chunk's items were not on SQLite and
                PostgreSQL (one transaction) and may have been elsewhere.
        """
        batch = checked(self.core, items)
        if not batch:
            return []
        return await arun(self.frames.save_many(batch), self._io)

    async def load(self, key: str, *, allow_expired: bool = False) -> Parked | None:
        """Open the envelope parked under `key`, with the token that can claim it.

        Args:
            key: the suspension's name within this identity.
            allow_expired: return an envelope past its deadline instead of raising (inspection tools only).

        Returns:
            `Parked(envelope, token)`, or None when nothing is parked.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            Expired: the deadline has passed (unless `allow_expired`, for inspection tools);
                carries `key`, `deadline` and `token`.
            IntegrityError: the frame was changed, moved, sealed under a key this sealer
                does not hold, or is plaintext in a sealed store.
            FormatError: not a berth frame, or a newer format (left untouched).
            BackendError: the backend failed.
        """
        self.core.name(key)
        return await arun(self.frames.load(key, allow_expired), self._io)  # twin: async-only
        # twin: sync return self._hot.load(key, allow_expired)

    async def load_many(self, keys: Sequence[str], *, allow_expired: bool = False) -> list[Parked | None]:
        """`load` of several keys at once: one round trip where the backend can (SQLite,
        PostgreSQL, Redis, memory), one read per key elsewhere.

        Returns:
            One `Parked` or None per key, in the order of `keys`.

        Raises:
            InvalidKey: any key breaks the key rules (before any I/O).
            Expired, IntegrityError, FormatError: as `load`, for the first key (in order)
                whose envelope is past its deadline or does not open.
            BackendError: the backend failed.
        """
        keys, names = self.core.names(keys)
        if not names:
            return []
        return await arun(self.frames.load_many(keys, names, allow_expired), self._io)

    async def delete(self, key: str, token: Token) -> None:
        """Remove the envelope under `key` only if `token` is still its current generation.

        Args:
            key: the suspension's name within this identity.
            token: the token a `load` returned.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            TokenMismatch: the token is stale, zero, or nothing is parked.
            BackendError: the backend failed; the envelope may or may not be gone.
        """
        await self._remove(key, token, "deleted")

    async def _remove(self, key: str, token: Token, how: str, seen: object = None, *, whole: bool = False) -> None:
        """`delete`, saying how the frame left (`StoreSteps.remove`); `whole`: read the frame whole (a sweep
        or a prefix delete) rather than by its head."""
        await arun(self.frames.remove(key, token, how, seen, whole), self._io)  # twin: async-only
        # twin: sync self._hot.remove(key, token, how, seen, whole)

    async def claim(self, key: str) -> Envelope | None:
        """Load and delete: exactly one caller across threads, processes and hosts gets the envelope.

        Args:
            key: the suspension's name within this identity.

        Returns:
            The envelope to the winner; None to every other caller and when nothing is parked.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            Expired: the envelope was past its deadline; it has been removed.
            IntegrityError, FormatError: the frame does not open; it is left in place.
            BackendError: the backend failed; if it failed during the delete the claim's
                outcome is unknown and the caller must not resume.
        """
        return await arun(self.core.claim_plan(key), self._claiming)

    async def _claim_load(self, key: str) -> tuple[Parked | None, object]:
        """A claim's load, and with a witness the snapshot it judged (its `_remove` reuses it)."""
        return await arun(self.frames.claim_load(key), self._io)  # twin: sync return self._hot.claim_load(key)

    async def _heads(
        self, prefix: str, what: str, *, ordered: bool = False, limit: int | None = None, reverse: bool = False
    ) -> AsyncIterator[tuple[str, Header | Unreadable, Token, int]]:
        """(key, header, token, size) of every frame under `prefix`, one at a time.

        One bad entry never stops the walk: a frame whose header cannot be read (or a value
        that is not a frame at all) comes out with an `Unreadable` saying why in place of its
        header. Only a failure of the backend itself (`BackendError`) ends it.
        """
        core = self.core
        count = 0  # twin: async-only
        try:
            if ordered:
                rows = self.backend.sorted_heads(core.prefix + prefix, core.head_read, limit=limit, reverse=reverse)
            else:
                rows = self.backend.heads(core.prefix + prefix, core.head_read)
            async for name, head, token, size in rows:
                # twin: async-only
                count += 1
                if count % _ROWS_PER_STEP == 0:
                    # A backend hands over a page of rows at once: without this, a page of 1,000
                    # headers parsed back to back held the loop for ~10 ms.
                    await asyncio.sleep(0)
                # twin: end
                if core.needs_full(head):
                    # A header longer than the first read: read just the header, never the frame.
                    found = await self.backend.head(name, core.header_size(head))
                    if found is None:
                        continue
                    head, token = found
                yield core.peeked(name, head, token, size)
        except Exception as exc:
            core.reraise(exc, prefix or "*", what)

    def _walk(
        self, prefix: str, after: str | None, progress: Callable[[str], None] | None, what: str
    ) -> AsyncIterator[tuple[str, Header | Unreadable, Token, int]]:
        """The heads a bulk call (`what`) walks: any order, or key order from after `after` when it resumes
        (`after`) or reports progress (`progress`), so that a walk cut short resumes where it stopped.

        A failure of the listing comes out as a berth error naming the identity and `prefix`; what the
        caller does with each row (its callbacks too) is not in here, and is not mapped.
        """
        if after is None and progress is None:
            return self._heads(prefix, what)
        rows = self._heads(prefix, what, ordered=True)
        return rows if after is None else (row async for row in rows if row[0] > after)

    def list(self, prefix: str = "", *, limit: int | None = None, reverse: bool = False) -> AsyncIterator[Listing]:
        """Stream what is parked under `prefix` in key order, from cleartext headers: no keys needed.

        Keys come in bytewise UTF-8 order (`reverse`: descending), so the latest of keys
        that sort by time -- a thread's checkpoints, say -- is `list(prefix, limit=1,
        reverse=True)`: one bounded query on SQLite and PostgreSQL. In bounded memory however
        many frames are parked. A frame whose header cannot be read is listed too, with `error`
        set (never skipped: something that looks for the latest must not serve an older state
        as the latest; it counts toward `limit`); one bad entry never stops the listing. The
        cost per backend is in docs/store.md.

        Args:
            prefix: only keys starting with it ("" for all); "a/" lists a's children.
            limit: at most this many listings (None: all).
            reverse: descending key order.

        Raises:
            InvalidKey: a prefix with control characters or a leading "/" (before any I/O).
            BackendError: the backend failed.
        """
        self.core.check_list(prefix, limit)
        return self._listings(prefix, limit, reverse)

    async def _listings(self, prefix: str, limit: int | None, reverse: bool) -> AsyncIterator[Listing]:
        async for key, header, token, size in self._heads(prefix, "list", ordered=True, limit=limit, reverse=reverse):
            yield self.core.listing(key, header, token, size)

    def load_prefix(
        self,
        prefix: str = "",
        *,
        limit: int | None = None,
        reverse: bool = False,
        allow_expired: bool = False,
        before: str | None = None,
    ) -> AsyncIterator[tuple[str, Parked]]:
        """Stream `(key, Parked)` of what is parked under `prefix` in key order: `list` and `load_many` in one read.

        The order, `limit` and `reverse` of `list` (the newest `n` of keys that sort by time:
        `load_prefix(prefix, limit=n, reverse=True)`); each frame opened and checked as `load`
        opens it, so the first (in order) that is past its deadline or does not open raises,
        as in `load_many`. One bounded query on SQLite and PostgreSQL (64 frames a page);
        elsewhere the names, then `load_many` 64 at a time. With a witness, one witnessed load
        per listed key.

        Args:
            prefix: only keys starting with it ("" for all).
            limit: at most this many envelopes (None: all).
            reverse: descending key order.
            allow_expired: return envelopes past their deadline instead of raising (inspection tools only).
            before: only keys that sort before it (`reverse=True`: the page of history before a
                key). One bounded query on SQLite and PostgreSQL; elsewhere, and with a witness,
                the names after it are listed and passed over.

        Raises:
            InvalidKey: a prefix or `before` with control characters or a leading "/" (before any I/O).
            ValueError: a limit that is not a positive int (before any I/O).
            Expired, IntegrityError, FormatError: as `load`, for the first such frame in order.
            BackendError: the backend failed.
        """
        self.core.check_list(prefix, limit)
        if before is not None:
            self.core.check_prefix(before)
        return self._loaded(prefix, limit, reverse, allow_expired, before)

    async def _loaded(
        self, prefix: str, limit: int | None, reverse: bool, allow_expired: bool, before: str | None
    ) -> AsyncIterator[tuple[str, Parked]]:
        core = self.core
        bounded = {} if before is None else {"before": core.prefix + before}
        try:
            rows = self.backend.sorted_frames(core.prefix + prefix, limit=limit, reverse=reverse, **bounded)
            async for name, data, token in rows:
                key, parked = await arun(self.frames.loaded(name, data, token, allow_expired), self._io)
                if parked is not None:  # a witnessed load of a key that left meanwhile
                    yield key, parked
        except Exception as exc:
            core.reraise(exc, prefix or "*", "load")

    async def delete_prefix(
        self, prefix: str, *, after: str | None = None, on_progress: Callable[[str], None] | None = None
    ) -> int:
        """Delete every envelope whose key starts with `prefix`, each only if unchanged since read.

        An envelope re-saved meanwhile survives (as in `sweep`); frames that do not open
        are deleted too. `"thread-1/"` removes a thread's keys; `"thread-1"` would also
        remove `thread-10`'s. An empty prefix empties the identity. Needs no keys. What `on_progress`
        raises comes out as raised (never a `BackendError`) and ends the walk.
        Batched where the backend can (one transaction or statement per 500 on SQLite,
        PostgreSQL and Redis).

        Args:
            prefix: only keys starting with it.
            after: resume a walk cut short: only keys that sort after it (the walk is in key order).
            on_progress: called with each key walked, in key order, once it is dealt with (a
                batch's keys after the batch's delete); given, the walk is in key order.

        Returns:
            How many envelopes were deleted.

        Raises:
            InvalidKey: a prefix (or `after`) with control characters or a leading "/" (before any I/O).
            BackendError: the backend failed; some envelopes may be gone.
        """
        self.core.check_walk(prefix, after)
        removed = 0
        batch: list[tuple[str, Token]] = []
        async for key, _header, token, _ in self._walk(prefix, after, on_progress, "delete_prefix"):
            if token.is_zero:  # a value the backend could not read as one of its records
                if on_progress is not None and not batch:
                    on_progress(key)
                continue
            batch.append((key, token))
            if len(batch) >= _DELETE_BATCH:  # twin: sync if len(batch) >= self.core.delete_batch:
                removed += await self._delete_batch(batch, prefix, on_progress)
                batch = []
        if batch:
            removed += await self._delete_batch(batch, prefix, on_progress)
        return removed

    async def _delete_batch(
        self, batch: Sequence[tuple[str, Token]], prefix: str, on_progress: Callable[[str], None] | None
    ) -> int:
        try:
            removed: int = await arun(self.frames.delete_rows(batch), self._io)
        except Exception as exc:
            self.core.reraise(exc, prefix or "*", "delete_prefix")
        if on_progress is not None:
            for key, _ in batch:
                on_progress(key)
        return removed

    async def sweep(
        self,
        now: datetime | None = None,
        *,
        on_removed: Callable[[Listing], None] | None = None,
        prefix: str = "",
        after: str | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> int:
        """Delete every envelope past its deadline, each only if unchanged since read.

        Streams: memory stays bounded however many frames are parked or expired. An
        envelope re-saved during the sweep survives; a frame whose header cannot be read
        is left in place (`list` shows it). Needs no keys. What `on_removed` or `on_progress` raises
        comes out as raised (never a `BackendError`) and ends the sweep.

        Args:
            now: the instant to compare deadlines with (default: the store's clock).
            on_removed: called with each removed envelope's listing, right after its delete.
            prefix: only keys starting with it ("" for all).
            after: resume a sweep cut short: only keys that sort after it (the walk is in key order).
            on_progress: called with each key walked (expired or not), in key order, once it
                is dealt with; given, the walk is in key order.

        Returns:
            How many envelopes were deleted.

        Raises:
            InvalidKey: a prefix (or `after`) with control characters or a leading "/" (before any I/O).
            InvalidEnvelope: `now` is a naive datetime.
            BackendError: the backend failed (what was deleted before stays deleted).
        """
        core = self.core
        core.check_walk(prefix, after)
        now = core.sweep_now(now)
        removed = 0
        async for key, header, token, size in self._walk(prefix, after, on_progress, "sweep"):
            if core.is_expired(header, now):
                try:
                    swept = await arun(self.frames.sweep_one(key, token), self._io)
                except Exception as exc:
                    core.reraise(exc, prefix or "*", "sweep")
                if swept:
                    removed += 1
                    if on_removed is not None:
                        on_removed(core.listing(key, header, token, size))
            if on_progress is not None:
                on_progress(key)
        return removed

    async def reseal(
        self, *, prefix: str = "", after: str | None = None, on_progress: Callable[[str], None] | None = None
    ) -> ResealReport:
        """Re-seal every envelope not sealed by the sealer's current key.

        Each is written back only if unchanged since it was read: a concurrent save wins. What
        `on_progress` raises comes out as raised and ends the walk.

        Args:
            prefix: only keys starting with it ("" for all).
            after: resume a reseal cut short: only keys that sort after it (the walk is in key order).
            on_progress: called with each key walked (resealed or not), in key order, once it
                is dealt with; given, the walk is in key order.

        Returns:
            How many frames moved (an int), with `.skipped` (changed meanwhile) and
            `.failed` (could not be opened) counts.

        Raises:
            InvalidKey: a prefix (or `after`) with control characters or a leading "/" (before any I/O).
            BackendError: the listing failed (a frame that fails to re-seal is counted in `.failed`).
        """
        self.core.check_walk(prefix, after)
        tally = self.core.reseal_tally()
        async for key, header, _, _ in self._walk(prefix, after, on_progress, "reseal"):
            if tally.wants(key, header):
                tally.record(key, await self._reseal_one(key))
            if on_progress is not None:
                on_progress(key)
        return tally.report()

    async def _reseal_one(self, key: str) -> BaseException | bool:
        try:
            return await arun(self.frames.reseal_one(key), self._io)
        except Exception as exc:
            return exc

    async def adopt(self) -> int:
        """Record in the witness every frame parked before the store had one: trust them as they are now.

        A frame written without a witness has no sequence number, and the witness has no record
        of its key, so a load refuses it and `audit()` reports it `unknown`. `adopt` re-seals
        each such frame with a sequence number through the witness (a witnessed save,
        conditional on the frame being unchanged since it was read), so it loads again. It
        takes the store's contents at this moment as genuine: run it once, when the witness is
        added, on a store you trust; an older frame put back before it is adopted as the latest.
        A frame that does not open, one that has a sequence number, and a key the witness has a
        record of are left as they are (`audit()` still reports them).

        Returns:
            How many frames were adopted.

        Raises:
            BerthError: the store has no witness (open it with `witness=URL`).
            BackendError: the store's or the witness's backend failed.
        """
        self.frames.needs_witness("adopt")
        adopted = 0
        async for key, header, token, size in self._walk("", None, None, "adopt"):
            if isinstance(header, Unreadable) or header.seq is not None:
                continue
            adopted += await arun(self.frames.adopt_one(key, token, size), self._io)
        return adopted

    async def acknowledge(self, key: str) -> bool:
        """Accept that the run the witness saw parked under `key`, now missing, is gone for good.

        The operator's answer to a `missing` key (or one whose recorded frame was replaced by an
        older or unknown one): until then the witness refuses every save over the key, and load,
        claim and `audit()` keep reporting it. Records the frame as deleted; the key's saves then
        proceed (a frame still in place stays refused, `replayed` or `unknown`, until it is saved
        over or deleted). Restore the frame instead if you have it.

        Returns:
            True if it recorded a missing frame as gone; False if the witness knew of none.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            BerthError: the store has no witness (open it with `witness=URL`).
            IntegrityError: the key's witness record does not open.
            BackendError: the store's or the witness's backend failed.
        """
        self.frames.needs_witness("acknowledge")
        self.core.name(key)
        return await arun(self.frames.acknowledge(key), self._io)

    async def audit(self) -> AuditReport:
        """Compare every frame with the witness's record of its key: what is missing, replayed or unknown.

        Reads every frame whole once (a frame whose digest is the witnessed one is not opened). A
        save or claim racing the audit is never reported. Keys where a witness write failed after
        a commit point (noted beside the frames) have their records settled and are reported once,
        as `unsettled`.

        Returns:
            `AuditReport(missing, replayed, unknown, tampered, checked, unsettled)`; `.ok` when
            the first four are empty.

        Raises:
            BerthError: the store has no witness (open it with `witness=URL`).
            BackendError: the store's or the witness's backend failed.
        """
        self.frames.needs_witness("audit")
        return await arun(self.frames.audit(), self._io)


class _Steps:
    """The store playing `StoreSteps`: its own methods, bound once (no call of its own per step)."""

    __slots__ = ("claim_load", "load", "remove", "save")

    def __init__(self, store: AsyncStore):
        self.save = store.save
        self.load = store.load
        self.claim_load = store._claim_load
        self.remove = store._remove


# twin: sync publish(globals())  # its public names read as berth.X
