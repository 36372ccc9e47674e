"""`AsyncStore`: the store contract awaited, the same shell as `Store` over the same core and plans.

An `AsyncStore` holds its own `StoreCore` (key and identity rules, save conditions, the codec,
sealing and opening, expiry, the messages of every error), the frames strategy chosen at open
(`berth._witnessed.frames_for`: plain or witnessed) and an `AsyncBackend`. Each method checks
its arguments as `Store`'s does and awaits the same plan (`berth._plan.arun`). Sealing or
opening a frame of `OFF_LOOP_BYTES` or more runs in a worker thread, so a 64 MiB state never
holds the event loop for the tens of milliseconds AES-GCM and the JSON codec take over it. An
enumeration (list, sweep, reseal, delete_prefix, adopt) lets the loop run other tasks every 64
rows, however large the backend's pages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from berth._batch import SaveItem, SaveResult, checked
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
from berth._plan import OFF_LOOP_BYTES, Cpu, arun
from berth._sealer import Sealer
from berth._store import Store
from berth._token import Token
from berth._witness import AuditReport
from berth._witnessed import Frames, frames_for
from berth.backends._aio import AsyncBackend, sync_twin

__all__ = ["OFF_LOOP_BYTES", "AsyncStore"]

_ROWS_PER_STEP = 64  # an enumeration lets the loop run other tasks after this many rows (~1 ms of headers)
_DELETE_BATCH = 128  # frames per delete_many of delete_prefix (the sync store's 500 took ~10 ms of one loop step)

T = TypeVar("T")


class _OffLoop:
    """`berth._plan.cpu`'s "cpu" role under `arun`: large work in a worker thread, off the event loop."""

    @staticmethod
    async def run(fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)


_OFF_LOOP = _OffLoop()


class AsyncStore:
    """`Store`'s contract, awaited: `await save/load/delete/claim/sweep/reseal`, `async for` over `list`.

    Open one with `berth.aio.open_store(url, ...)`. Safe to share between tasks
    of one event loop (and its backend between processes, as the sync one's).
    Same semantics, errors and messages as `berth.Store`.
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
        """Wrap an async backend (arguments as `berth.Store`'s; `witness` an async backend too).

        The backend's sync twin (`backend.sync`, which every built-in one has) backs `.sync`.
        """
        if sealer is None:
            warn_plaintext(f"for identity {identity!r}")
            sealer = PlaintextSealer()
        self._core = StoreCore(
            identity=identity,
            sealer=sealer,
            accept_plaintext=accept_plaintext,
            max_envelope_bytes=max_envelope_bytes,
            clock=clock,
            namespace=namespace,
        )
        self._opened: dict[str, Any] = {"identity": identity, "namespace": namespace, "clock": clock}
        self._opened |= {"accept_plaintext": accept_plaintext, "max_envelope_bytes": max_envelope_bytes}
        self._sync: Store | None = None
        self.backend = backend
        self.frames: Frames = frames_for(self._core, witness)
        """How this store writes and reads frames, chosen here once: plainly, or through a witness."""
        self._io = {FrameIO: AsyncIO(records=witness, owner=self), Cpu: _OFF_LOOP}
        instrument(self, "store", identity=self._core.identity, backend=backend)  # before steps bind them
        self.steps = _Steps(self)
        """This store playing `StoreSteps` in plans, awaited (a claim's, a coordinator's, the question store's)."""
        self._targets = {StoreSteps: self.steps}

    @property
    def identity(self) -> str:
        """The namespace of this store."""
        return self._core.identity

    @property
    def sealer(self) -> Any:
        """What seals new frames and opens parked ones."""
        return self._core.sealer

    @property
    def accept_plaintext(self) -> bool:
        """Whether plaintext frames open in a sealed store (fixed at open, for migrations only)."""
        return self._core.accept_plaintext

    @property
    def core(self) -> StoreCore:
        """Every decision this store makes that is not I/O (as `Store.core`)."""
        return self._core

    @property
    def sync(self) -> Store:
        """The sync `Store` over the same backends and sealer (for code that is not async), made on first use."""
        if self._sync is None:
            records = self.frames.records
            self._sync = Store(
                sync_twin(self.backend),
                sealer=self._core.sealer,
                witness=None if records is None else sync_twin(records),
                **self._opened,
            )
        return self._sync

    @property
    def max_envelope_bytes(self) -> int:
        """Envelopes larger than this once encoded are refused (`EnvelopeTooLarge`), as `Store.max_envelope_bytes`."""
        return self._core.max_envelope_bytes

    def check_key(self, key: str) -> str:
        """Return `key` if this store accepts it (the key rules); no I/O, as `Store.check_key`."""
        return self.core.check_key(key)

    def now(self) -> datetime:
        """The store's clock."""
        return self._core.clock()

    def __repr__(self) -> str:
        return f"AsyncStore({self.backend!r}, identity={self.identity!r}, sealer={self.sealer!r})"

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the backend's connections and threads (and the witness's)."""
        await self.backend.aclose()
        if self.frames.records is not None:
            await self.frames.records.aclose()

    async def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent), as `Store.setup`."""
        try:
            await self.backend.setup()
        except Exception as exc:
            self._core.reraise(exc, "*", "setup")

    async def save(
        self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None
    ) -> Token:
        """Seal and park `envelope` under `key`, as `Store.save` (same conditions, errors, token)."""
        core = self._core
        core.name(key)
        core.check_condition(key, if_absent, if_match)
        return await arun(self.frames.save(key, envelope, if_absent, if_match), self._io)

    async def save_many(self, items: Iterable[SaveItem | tuple[str, Envelope]]) -> list[SaveResult]:
        """`save` of many envelopes at once, each item's outcome reported, as `Store.save_many`.

        A chunk's frames are sealed off the event loop when they are large together (as one large
        state's are).
        """
        batch = checked(self._core, items)
        if not batch:
            return []
        return await arun(self.frames.save_many(batch), self._io)

    async def load(self, key: str, *, allow_expired: bool = False) -> Parked | None:
        """Open the envelope parked under `key`, as `Store.load`."""
        self._core.name(key)
        return await arun(self.frames.load(key, allow_expired), self._io)

    async def load_many(self, keys: Sequence[str], *, allow_expired: bool = False) -> list[Parked | None]:
        """`load` of several keys in one round trip where the backend can, as `Store.load_many`."""
        keys, names = self._core.names(keys)
        if not names:
            return []
        return await arun(self.frames.load_many(keys, names, allow_expired), self._io)

    async def delete(self, key: str, token: Token) -> None:
        """Remove the envelope under `key` only if `token` is current, as `Store.delete`."""
        await self._remove(key, token, "deleted")

    async def _remove(self, key: str, token: Token, how: str, seen: object = None, *, whole: bool = False) -> None:
        """`delete`, saying how the frame left (`StoreSteps.remove`), as `Store._remove`."""
        await arun(self.frames.remove(key, token, how, seen, whole), self._io)

    async def _claim_load(self, key: str) -> tuple[Parked | None, object]:
        """A claim's load and the snapshot it judged, as `Store._claim_load`."""
        return await arun(self.frames.claim_load(key), self._io)

    async def claim(self, key: str) -> Envelope | None:
        """Load and delete for exactly one caller, as `Store.claim`."""
        return await arun(self._core.claim_plan(key), self._targets)

    def list(self, prefix: str = "", *, limit: int | None = None, reverse: bool = False) -> AsyncIterator[Listing]:
        """`async for` what is parked under `prefix` in key order, as `Store.list`.

        Bad arguments raise here, before any I/O; the listing itself runs as you iterate.
        """
        self._core.check_list(prefix, limit)
        return self._listings(prefix, limit, reverse)

    async def _listings(self, prefix: str, limit: int | None, reverse: bool) -> AsyncIterator[Listing]:
        rows = self.backend.sorted_heads(self._core.prefix + prefix, self._core.head_read, limit=limit, reverse=reverse)
        async for key, header, token, size in self._peeked(rows, prefix, "list"):
            if header is not None:
                yield self._core.listing(key, header, token, size)

    def load_prefix(
        self,
        prefix: str = "",
        *,
        limit: int | None = None,
        reverse: bool = False,
        allow_expired: bool = False,
        before: str | None = None,
    ) -> AsyncIterator[tuple[str, Parked]]:
        """`async for key, parked in` what is parked under `prefix` in key order, as `Store.load_prefix`.

        Bad arguments raise here, before any I/O; the load itself runs as you iterate.
        """
        self._core.check_list(prefix, limit)
        if before is not None:
            self._core.check_prefix(before)
        return self._loaded(prefix, limit, reverse, allow_expired, before)

    async def _loaded(
        self, prefix: str, limit: int | None, reverse: bool, allow_expired: bool, before: str | None
    ) -> AsyncIterator[tuple[str, Parked]]:
        core = self._core
        bounded = {} if before is None else {"before": core.prefix + before}
        try:
            async for name, data, token in self.backend.sorted_frames(
                core.prefix + prefix, limit=limit, reverse=reverse, **bounded
            ):
                key, parked = await arun(self.frames.loaded(name, data, token, allow_expired), self._io)
                if parked is not None:  # a witnessed load of a key that left meanwhile
                    yield key, parked
        except Exception as exc:
            core.reraise(exc, prefix or "*", "load")

    async def _peeked(self, rows: AsyncIterator[Any], prefix: str, what: str) -> AsyncIterator[Any]:
        core = self._core
        count = 0
        try:
            async for name, head, token, size in rows:
                count += 1
                if count % _ROWS_PER_STEP == 0:
                    # A backend hands over a page of rows at once: without this, a page of 1,000
                    # headers parsed back to back held the loop for ~10 ms.
                    await asyncio.sleep(0)
                if core.needs_full(head):
                    # A header longer than the first read: read just the header, never the frame.
                    found = await self.backend.head(name, core.header_size(head))
                    if found is None:
                        continue
                    head, token = found
                yield core.peeked(name, head, token, size)
        except Exception as exc:
            self._core.reraise(exc, prefix or "*", what)

    async def _walk(
        self, prefix: str, after: str | None, progress: Callable[[str], None] | None, what: str
    ) -> AsyncIterator[Any]:
        """The heads a bulk call walks, as `Store._walk`: key order when it resumes or reports progress."""
        core = self._core
        full = core.prefix + prefix
        if after is not None or progress is not None:
            rows = self.backend.sorted_heads(full, core.head_read, limit=None, reverse=False)
        else:
            rows = self.backend.heads(full, core.head_read)
        async for row in self._peeked(rows, prefix, what):
            if after is None or row[0] > after:
                yield row

    async def delete_prefix(
        self, prefix: str, *, after: str | None = None, on_progress: Callable[[str], None] | None = None
    ) -> int:
        """Delete every envelope under `prefix`, each conditionally, as `Store.delete_prefix`."""
        core = self._core
        core.check_walk(prefix, after)
        removed = 0
        batch: list[tuple[str, Token]] = []
        async for key, _header, token, _ in self._walk(prefix, after, on_progress, "delete_prefix"):
            if token.is_zero:  # a value the backend could not read as one of its records, as Store's
                if on_progress is not None and not batch:
                    on_progress(key)
                continue
            batch.append((key, token))
            if len(batch) >= _DELETE_BATCH:
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
            self._core.reraise(exc, prefix or "*", "delete_prefix")
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
        """Delete every envelope past its deadline, each conditionally, as `Store.sweep`.

        Streams as `Store.sweep` does: each expired frame is deleted as its page of headers
        arrives, and `on_removed` is called with its listing right after the delete.
        """
        core = self._core
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

    async def adopt(self) -> int:
        """Record in the witness every frame parked before the store had one, as `Store.adopt`."""
        self.frames.needs_witness("adopt")
        core = self._core
        adopted = 0
        async for key, header, token, size in self._peeked(
            self.backend.heads(core.prefix, core.head_read), "", "adopt"
        ):
            if isinstance(header, Unreadable) or header.seq is not None:
                continue
            adopted += await arun(self.frames.adopt_one(key, token, size), self._io)
        return adopted

    async def acknowledge(self, key: str) -> bool:
        """Accept that the run the witness saw parked under `key`, now missing, is gone, as `Store.acknowledge`."""
        self.frames.needs_witness("acknowledge")
        self._core.name(key)
        return await arun(self.frames.acknowledge(key), self._io)

    async def audit(self) -> AuditReport:
        """Compare every frame with the witness's record of its key, as `Store.audit`."""
        self.frames.needs_witness("audit")
        return await arun(self.frames.audit(), self._io)

    async def reseal(
        self, *, prefix: str = "", after: str | None = None, on_progress: Callable[[str], None] | None = None
    ) -> ResealReport:
        """Re-seal every envelope not sealed by the sealer's current key, as `Store.reseal`."""
        core = self._core
        core.check_walk(prefix, after)
        tally = core.reseal_tally()
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


class _Steps:
    """An `AsyncStore` playing `StoreSteps`, awaited: its own methods, bound once."""

    __slots__ = ("claim_load", "load", "remove", "save")

    def __init__(self, store: AsyncStore):
        self.save = store.save
        self.load = store.load
        self.claim_load = store._claim_load
        self.remove = store._remove
