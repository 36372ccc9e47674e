"""`AsyncStore`: the store contract awaited, over the same core as `Store`.

An `AsyncStore` holds a `Store` for everything that is not I/O -- key and
identity rules, save conditions, the codec, sealing and opening, expiry, the
messages of every error -- and an `AsyncBackend` for the I/O. Each method is
the sync method's shell with the backend call awaited; the multi-step
protocol (claim) is one plan (`berth._plan`) that both drive. Sealing or opening
a frame of `OFF_LOOP_BYTES` or more runs in a worker thread, so a 64 MiB state
never holds the event loop for the tens of milliseconds AES-GCM and the JSON
codec take over it. An enumeration (list, sweep, reseal, delete_prefix) lets the
loop run other tasks every 64 rows, however large the backend's pages.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from berth._envelope import Envelope
from berth._errors import TokenMismatch
from berth._plan import OFF_LOOP_BYTES, Plan, arun
from berth._sealer import Sealer
from berth._store import DEFAULT_MAX_ENVELOPE_BYTES, Listing, Parked, ResealReport, Store, StoreSteps
from berth._token import Token
from berth._witness import AuditReport, Snapshot
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
        self._sync = Store(
            sync_twin(backend),
            identity=identity,
            sealer=sealer,
            accept_plaintext=accept_plaintext,
            max_envelope_bytes=max_envelope_bytes,
            clock=clock,
            witness=None if witness is None else sync_twin(witness),
            namespace=namespace,
        )
        self._core = self._sync.core
        self.backend = backend
        self._witness_backend = witness
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
    def sync(self) -> Store:
        """The sync `Store` over the same backend and sealer (for code that is not async)."""
        return self._sync

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
        if self._witness_backend is not None:
            await self._witness_backend.aclose()

    async def _witnessed(self, key: str, what: str, plan: Plan[T]) -> T:
        """Await a witness plan (berth._witness) over this store's backend and its witness's."""
        try:
            assert self._core.witness is not None
            targets = self._core.witness.targets(self.backend, _OFF_LOOP, self._witness_backend)
            return await arun(plan, targets)
        except Exception as exc:
            self._core.reraise(exc, key, what)

    async def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent), as `Store.setup`."""
        try:
            await self.backend.setup()
        except Exception as exc:
            self._core.reraise(exc, "*", "setup")

    async def _cpu(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        if size < OFF_LOOP_BYTES:
            return fn(*args)
        return await _OFF_LOOP.run(fn, *args)

    # --- the contract ------------------------------------------------------------------

    async def save(
        self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None
    ) -> Token:
        """Seal and park `envelope` under `key`, as `Store.save` (same conditions, errors, token)."""
        core = self._core
        name = core.name(key)
        core.check_condition(key, if_absent, if_match)
        if core.witness is not None:
            build = core.witness_build(key, envelope)
            plan = core.witness.save(core, key, build, if_absent, if_match, size=core.state_size(envelope))
            return await self._witnessed(key, "save", plan)
        frame = await self._cpu(core.state_size(envelope), core.build, key, envelope)
        try:
            return await self.backend.put(name, frame, if_match=if_match, if_absent=if_absent)
        except Exception as exc:
            self._core.reraise(exc, key, "save")

    async def load(self, key: str, *, allow_expired: bool = False) -> Parked | None:
        """Open the envelope parked under `key`, as `Store.load`."""
        core = self._core
        if core.witness is not None:
            return await self._witnessed(key, "load", core.witness.load(core, key, allow_expired))
        name = core.name(key)
        try:
            found = await self.backend.get(name)
        except Exception as exc:
            self._core.reraise(exc, key, "load")
        size = 0 if found is None else len(found[0])
        return await self._cpu(size, core.opened, key, found, allow_expired)

    async def load_many(self, keys: Sequence[str], *, allow_expired: bool = False) -> list[Parked | None]:
        """`load` of several keys in one round trip where the backend can, as `Store.load_many`."""
        core = self._core
        keys, names = core.names(keys)
        if not names:
            return []
        if core.witness is not None:
            return [await self.load(key, allow_expired=allow_expired) for key in keys]
        try:
            found = await self.backend.get_many(names)
        except Exception as exc:
            self._core.reraise(exc, core.many(keys), "load")
        size = sum(len(f[0]) for f in found if f is not None)
        return await self._cpu(size, core.opened_many, keys, found, allow_expired)

    async def delete(self, key: str, token: Token) -> None:
        """Remove the envelope under `key` only if `token` is current, as `Store.delete`."""
        await self._remove(key, token, "deleted")

    async def _remove(self, key: str, token: Token, how: str, seen: object = None, *, whole: bool = False) -> None:
        """`delete`, saying how the frame left (`StoreSteps.remove`), as `Store._remove`."""
        core = self._core
        if core.witness is not None:
            seen = seen if isinstance(seen, Snapshot) else None
            await self._witnessed(key, how, core.witness.leave(core, key, token, how, seen, whole=whole))
            return
        name = core.delete_name(key, token)
        try:
            await self.backend.delete(name, token)
        except Exception as exc:
            self._core.reraise(exc, key, "delete")

    async def _claim_load(self, key: str) -> tuple[Parked | None, object]:
        """A claim's load and the snapshot it judged, as `Store._claim_load`."""
        core = self._core
        if core.witness is not None:
            return await self._witnessed(key, "load", core.witness.load_seen(core, key, False))
        return await self.load(key), None

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
        if core.witness is not None:  # each frame judged by the witness, as Store.load_prefix
            rows = self.backend.sorted_heads(
                core.prefix + prefix, core.head_read, limit=None if before else limit, reverse=reverse
            )
            taken = 0
            async for key, _header, _token, _size in self._peeked(rows, prefix, "load"):
                if before is not None and key >= before:
                    continue
                if limit is not None and taken >= limit:
                    return
                taken += 1
                parked = await self.load(key, allow_expired=allow_expired)
                if parked is not None:
                    yield key, parked
            return
        bounded = {} if before is None else {"before": core.prefix + before}
        try:
            async for name, data, token in self.backend.sorted_frames(
                core.prefix + prefix, limit=limit, reverse=reverse, **bounded
            ):
                yield await self._cpu(len(data), core.loaded, name, data, token, allow_expired)
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

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every envelope under `prefix`, each conditionally, as `Store.delete_prefix`."""
        core = self._core
        core.check_prefix(prefix)
        removed = 0
        batch: list[tuple[str, Token]] = []
        try:
            async for key, _header, token, _ in self._peeked(
                self.backend.heads(core.prefix + prefix, core.head_read), prefix, "delete_prefix"
            ):
                if token.is_zero:  # a value the backend could not read as one of its records, as Store's
                    continue
                if core.witness is not None:  # one witnessed delete each, as Store.delete_prefix
                    removed += await self._removed(key, token, "deleted")
                    continue
                batch.append((core.prefix + key, token))
                if len(batch) >= _DELETE_BATCH:
                    removed += sum(await self.backend.delete_many(batch))
                    batch = []
            if batch:
                removed += sum(await self.backend.delete_many(batch))
        except Exception as exc:
            self._core.reraise(exc, prefix or "*", "delete_prefix")
        return removed

    async def sweep(self, now: datetime | None = None, *, on_removed: Callable[[Listing], None] | None = None) -> int:
        """Delete every envelope past its deadline, each conditionally, as `Store.sweep`.

        Streams as `Store.sweep` does: each expired frame is deleted as its page of headers
        arrives, and `on_removed` is called with its listing right after the delete.
        """
        core = self._core
        now = core.sweep_now(now)
        removed = 0
        async for key, header, token, size in self._peeked(
            self.backend.heads(core.prefix, core.head_read), "", "sweep"
        ):
            if not core.is_expired(header, now):
                continue
            if core.witness is not None:
                if not await self._removed(key, token, "swept"):
                    continue
            else:
                try:
                    await self.backend.delete(core.prefix + key, token)
                except TokenMismatch:
                    continue
                except Exception as exc:
                    self._core.reraise(exc, "*", "sweep")
            removed += 1
            if on_removed is not None:
                on_removed(self._core.listing(key, header, token, size))
        return removed

    async def _removed(self, key: str, token: Token, how: str) -> bool:
        try:
            await self._remove(key, token, how, whole=True)
        except TokenMismatch:
            return False
        return True

    async def adopt(self) -> int:
        """Record in the witness every frame parked before the store had one, as `Store.adopt` (in a worker thread)."""
        return await asyncio.to_thread(self._sync.adopt)

    async def acknowledge(self, key: str) -> bool:
        """Accept that the run the witness saw parked under `key`, now missing, is gone, as `Store.acknowledge`."""
        witness = self._core.witness
        if witness is None:
            return self._sync.acknowledge(key)  # raises, before any I/O: no witness
        self._core.name(key)
        return await self._witnessed(key, "acknowledge", witness.acknowledge(self._core, key))

    async def audit(self) -> AuditReport:
        """Compare every frame with the witness's record of its key, as `Store.audit` (in a worker thread)."""
        return await asyncio.to_thread(self._sync.audit)

    async def reseal(self) -> ResealReport:
        """Re-seal every envelope not sealed by the sealer's current key, as `Store.reseal`."""
        core = self._core
        tally = core.reseal_tally()
        async for key, header, _, _ in self._peeked(self.backend.heads(core.prefix, core.head_read), "", "reseal"):
            if not tally.wants(key, header):
                continue
            tally.record(key, await self._reseal_one(key))
        return tally.report()

    async def _reseal_one(self, key: str) -> BaseException | bool:
        core = self._core
        name = core.name(key)
        try:
            try:
                found = await self.backend.get(name)
            except Exception as exc:
                self._core.reraise(exc, key, "reseal")
            if found is None:
                return False
            data, token = found
            if core.witness is not None:
                env = await self._cpu(len(data), core.open, key, data)
                assert env.created_at is not None
                build = functools.partial(core.seal, key, env, env.created_at)
                plan = core.witness.save(core, key, build, False, token, strict=True, size=len(data))
                await self._witnessed(key, "reseal", plan)
                return True
            frame = await self._cpu(len(data), core.resealed, key, data)
            try:
                await self.backend.put(name, frame, if_match=token)
            except Exception as exc:
                self._core.reraise(exc, key, "reseal")
        except Exception as exc:
            return exc
        return True


class _Steps:
    """An `AsyncStore` playing `StoreSteps`, awaited: its own methods, bound once."""

    __slots__ = ("claim_load", "load", "remove", "save")

    def __init__(self, store: AsyncStore):
        self.save = store.save
        self.load = store.load
        self.claim_load = store._claim_load
        self.remove = store._remove
