"""Witnessed frames: the frames strategy of a store opened with `witness=URL`, and the choice made at open.

`WitnessedFrames` has the plans of `berth._frames.PlainFrames` (the same names, the same role,
`FrameIO`), each written against and judged by a `berth._witness.Witness` over the store's core:
a save records its candidate, writes the frame, records that it landed; a load is judged against
the key's record; a delete records how the frame left. `frames_for` picks the strategy once, when
a store is opened; the shells (`Store`, `berth.aio.AsyncStore`) run whichever they were given.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from berth._batch import SaveItem, SaveResult
from berth._codec import frame_head
from berth._core import Parked, StoreCore
from berth._envelope import Envelope
from berth._errors import EnvelopeTooLarge, FormatError, IntegrityError, TokenMismatch
from berth._frames import FrameIO, HotPath, PlainFrames, PlannedHotPath
from berth._plan import Plan, cpu, step
from berth._token import Token
from berth._witness import MAX_SEQ, AuditReport, Snapshot, Witness
from berth.backends import Data

if TYPE_CHECKING:
    from berth.backends._aio import AsyncBackend

__all__ = ["Frames", "WitnessedFrames", "frames_for"]


class Frames(Protocol):
    """A frames strategy: the plans a store runs for each operation (`PlainFrames`, `WitnessedFrames`)."""

    records: Any
    """The witness's backend, or None."""

    def save(self, key: str, envelope: Envelope, if_absent: bool, if_match: Token | None) -> Plan[Token]: ...
    def save_many(self, items: Sequence[SaveItem]) -> Plan[list[SaveResult]]: ...
    def load(self, key: str, allow_expired: bool) -> Plan[Parked | None]: ...
    def load_many(
        self, keys: Sequence[str], names: Sequence[str], allow_expired: bool
    ) -> Plan[list[Parked | None]]: ...
    def loaded(self, name: str, data: Data, token: Token, allow_expired: bool) -> Plan[tuple[str, Parked | None]]: ...
    def claim_load(self, key: str) -> Plan[tuple[Parked | None, object]]: ...
    def remove(self, key: str, token: Token, how: str, seen: object = None, whole: bool = False) -> Plan[None]: ...
    def delete_rows(self, rows: Sequence[tuple[str, Token]]) -> Plan[int]: ...
    def sweep_one(self, key: str, token: Token) -> Plan[bool]: ...
    def reseal_one(self, key: str) -> Plan[bool]: ...
    def needs_witness(self, what: str) -> None: ...
    def adopt_one(self, key: str, token: Token, size: int) -> Plan[bool]: ...
    def acknowledge(self, key: str) -> Plan[bool]: ...
    def audit(self) -> Plan[AuditReport]: ...
    def keys_after(self, prefix: str, after: str) -> Iterator[str]: ...
    def akeys_after(self, prefix: str, after: str) -> AsyncIterator[str]: ...
    def hot_path(self, owner: Any, targets: Mapping[Any, Any]) -> HotPath: ...


def frames_for(core: StoreCore, witness: Any = None) -> Frames:
    """The frames strategy of a store: plain, or witnessed by the backend `witness` (sync or async alike)."""
    if witness is None:
        return PlainFrames(core)
    return WitnessedFrames(core, Witness(witness, identity=core.identity, sealer=core.sealer))


class WitnessedFrames:
    """Frames written, read and removed through a witness (see the module docstring)."""

    def __init__(self, core: StoreCore, witness: Witness):
        self.core = core
        self.witness = witness
        self.records = witness.backend

    def __repr__(self) -> str:
        return f"WitnessedFrames({self.witness!r})"

    def hot_path(self, owner: Any, targets: Mapping[Any, Any]) -> HotPath:
        """The sync store's save, load, claim_load and remove: these plans, run (`PlannedHotPath`)."""
        return PlannedHotPath(self, targets)

    def _reraising(self, plan: Plan[Any], key: str, what: str) -> Plan[Any]:
        try:
            return (yield from plan)
        except Exception as exc:
            self.core.reraise(exc, key, what)

    def build(self, key: str, env: Envelope) -> Callable[[int], bytes]:
        """What a witnessed save seals once it has its sequence number; every check made now, before any I/O."""
        core = self.core
        core.check_envelope(key, env)
        created_at = env.created_at or core.clock()
        limits: dict[str, Any] = {"sealer": core.parts, "max_bytes": core.max_envelope_bytes}
        frame_head(env, identity=core.identity, key=key, created_at=created_at, seq=MAX_SEQ, **limits)
        return functools.partial(core.seal, key, env, created_at)

    def save(self, key: str, envelope: Envelope, if_absent: bool, if_match: Token | None) -> Plan[Token]:
        build = self.build(key, envelope)
        plan = self.witness.save(self.core, key, build, if_absent, if_match, size=self.core.state_size(envelope))
        token: Token = yield from self._reraising(plan, key, "save")
        return token

    def save_many(self, items: Sequence[SaveItem]) -> Plan[list[SaveResult]]:
        """One witnessed save per item, in order: each with the witness's crash guarantee as `save` has it
        (its candidate recorded, its frame written, its landing recorded), none batched."""
        out: list[SaveResult] = []
        for key, envelope, if_absent, if_match in items:
            try:
                token = yield from self.save(key, envelope, if_absent, if_match)
            except (TokenMismatch, EnvelopeTooLarge) as exc:
                out.append(SaveResult(key, None, exc))
            else:
                out.append(SaveResult(key, token))
        return out

    def load(self, key: str, allow_expired: bool) -> Plan[Parked | None]:
        parked: Parked | None = yield from self._reraising(
            self.witness.load(self.core, key, allow_expired), key, "load"
        )
        return parked

    def load_many(self, keys: Sequence[str], names: Sequence[str], allow_expired: bool) -> Plan[list[Parked | None]]:
        loaded = []
        for key in keys:
            loaded.append((yield from self.load(key, allow_expired)))
        return loaded

    def loaded(self, name: str, data: Data, token: Token, allow_expired: bool) -> Plan[tuple[str, Parked | None]]:
        """A row of an ordered load: its key loaded through the witness (None if it left meanwhile)."""
        key = name[len(self.core.prefix) :]
        return key, (yield from self.load(key, allow_expired))

    def claim_load(self, key: str) -> Plan[tuple[Parked | None, object]]:
        seen: tuple[Parked | None, Snapshot] = yield from self._reraising(
            self.witness.load_seen(self.core, key, False), key, "load"
        )
        return seen

    def remove(self, key: str, token: Token, how: str, seen: object = None, whole: bool = False) -> Plan[None]:
        snap = seen if isinstance(seen, Snapshot) else None
        yield from self._reraising(self.witness.leave(self.core, key, token, how, snap, whole=whole), key, how)

    def _removed(self, key: str, token: Token, how: str) -> Plan[bool]:
        try:
            yield from self.remove(key, token, how, whole=True)
        except TokenMismatch:
            return False
        return True

    def delete_rows(self, rows: Sequence[tuple[str, Token]]) -> Plan[int]:
        """One witnessed delete each: the witness records how each left."""
        removed = 0
        for key, token in rows:
            removed += yield from self._removed(key, token, "deleted")
        return removed

    def sweep_one(self, key: str, token: Token) -> Plan[bool]:
        return (yield from self._removed(key, token, "swept"))

    def reseal_one(self, key: str) -> Plan[bool]:
        """A new sequence number, and never for a frame the witness refuses."""
        core = self.core
        try:
            found = yield from step(FrameIO.frame_get, core.name(key))
        except Exception as exc:
            core.reraise(exc, key, "reseal")
        if found is None:
            return False
        data, token = found
        env = yield from cpu(len(data), core.open, key, data)
        assert env.created_at is not None
        build = functools.partial(core.seal, key, env, env.created_at)
        plan = self.witness.save(core, key, build, False, token, strict=True, size=len(data))
        yield from self._reraising(plan, key, "reseal")
        return True

    def needs_witness(self, what: str) -> None:
        return None

    def adopt_one(self, key: str, token: Token, size: int) -> Plan[bool]:
        """Adopt the frame under `key` listed at `token` (see `Store.adopt`): True if it was."""
        core = self.core
        try:
            found = yield from step(FrameIO.frame_get, core.name(key))
        except Exception as exc:
            core.reraise(exc, key, "adopt")
        if found is None or found[1] != token:
            return False  # changed since listed: a witnessed writer got there first
        try:
            env = yield from cpu(len(found[0]), core.open, key, found[0])
        except (IntegrityError, FormatError):
            return False  # does not open: left for audit to report
        assert env.created_at is not None
        build = functools.partial(core.seal, key, env, env.created_at)
        plan = self.witness.save(core, key, build, False, token, size=size, adopting=True)
        try:
            yield from self._reraising(plan, key, "adopt")
        except TokenMismatch:
            return False
        return True

    def acknowledge(self, key: str) -> Plan[bool]:
        self.core.name(key)
        acknowledged: bool = yield from self._reraising(self.witness.acknowledge(self.core, key), key, "acknowledge")
        return acknowledged

    def audit(self) -> Plan[AuditReport]:
        report: AuditReport = yield from self._reraising(self.witness.audit(self.core), "*", "audit")
        return report

    def keys_after(self, prefix: str, after: str) -> Iterator[str]:
        """Keys under `prefix` the witness has a record of, after `after` (a sync witness backend)."""
        return self.witness.keys_after(prefix, after)

    async def akeys_after(self, prefix: str, after: str) -> AsyncIterator[str]:
        """`keys_after` over an async witness backend (an `AsyncStore`'s): its listing awaited."""
        base, records = self.witness.name(""), cast("AsyncBackend", self.witness.backend)
        async for name, *_ in records.sorted_heads(base + prefix, 1, limit=None, reverse=True):
            key = name[len(base) :]
            if key <= after:
                return
            yield key
