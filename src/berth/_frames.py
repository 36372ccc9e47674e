"""How a store writes and reads its frames, as plans: the role they run against, and plain frames.

A store is opened with one frames strategy, chosen once at open: `PlainFrames` here (each
operation one backend call), or `berth._witnessed.WitnessedFrames` (each operation also read
against, and recorded in, a witness). Both are sets of plans (`berth._plan`) over the same role,
`FrameIO`: the store's backend ("frame_*") and, for a witness, a second backend ("record_*").
`Store` runs a strategy's plans, `berth.aio.AsyncStore` awaits the same plans; neither shell
branches on which strategy it holds, and the core (`berth._core.StoreCore`) knows of neither.

Every plan raises berth errors naming the store's identity and the key (it translates a
backend's own), so a shell runs it as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from berth._batch import SaveItem, SaveResult, built, chunks, outcomes
from berth._core import Parked, StoreCore
from berth._errors import BerthError, TokenMismatch
from berth._plan import Plan, cpu, role, run, step
from berth._token import Token
from berth.backends import Data, Put

if TYPE_CHECKING:
    from berth._envelope import Envelope

__all__ = ["AsyncIO", "FrameIO", "HotPath", "PlainFrames", "PlainHotPath", "PlannedHotPath", "SyncIO"]


@role
class FrameIO(Protocol):
    """The frames strategies' role: the store's backend ("frame_*") and a witness's ("record_*")."""

    def frame_get(self, name: str) -> tuple[Data, Token] | None:
        """The store backend's `get`."""
        ...

    def frame_head(self, name: str, size: int) -> tuple[Data, Token] | None:
        """The store backend's `head`."""
        ...

    def frame_put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """The store backend's `put`."""
        ...

    def frame_delete(self, name: str, token: Token) -> None:
        """The store backend's `delete`."""
        ...

    def frame_put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        """The store backend's `put_many`."""
        ...

    def frame_get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        """The store backend's `get_many`."""
        ...

    def frame_delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """The store backend's `delete_many`."""
        ...

    def frame_names(self, prefix: str) -> list[str]:
        """Every name under `prefix` in the store's backend."""
        ...

    def record_get(self, name: str) -> tuple[Data, Token] | None:
        """The witness backend's `get`."""
        ...

    def record_put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """The witness backend's `put`."""
        ...

    def record_names(self, prefix: str) -> list[str]:
        """Every name under `prefix` in the witness backend."""
        ...


class SyncIO:
    """Sync backends playing `FrameIO`. The store's backend is looked up at each call (`owner.backend`
    when an owner is given), so a backend replaced or patched on an open store is the one called."""

    def __init__(self, frames: Any = None, records: Any = None, *, owner: Any = None):
        self._fixed, self._owner, self._records = frames, owner, records

    @property
    def _frames(self) -> Any:
        return self._fixed if self._owner is None else self._owner.backend

    def frame_get(self, name: str) -> Any:
        return self._frames.get(name)

    def frame_head(self, name: str, size: int) -> Any:
        return self._frames.head(name, size)

    def frame_put(self, name: str, data: bytes, **condition: Any) -> Any:
        return self._frames.put(name, data, **condition)

    def frame_delete(self, name: str, token: Token) -> Any:
        return self._frames.delete(name, token)

    def frame_put_many(self, items: Sequence[Put]) -> Any:
        return self._frames.put_many(items)

    def frame_get_many(self, names: Sequence[str]) -> Any:
        return self._frames.get_many(names)

    def frame_delete_many(self, items: Sequence[tuple[str, Token]]) -> Any:
        return self._frames.delete_many(items)

    def frame_names(self, prefix: str) -> list[str]:
        return list(self._frames.scan(prefix))

    def record_get(self, name: str) -> Any:
        return self._records.get(name)

    def record_put(self, name: str, data: bytes, **condition: Any) -> Any:
        return self._records.put(name, data, **condition)

    def record_names(self, prefix: str) -> list[str]:
        return list(self._records.scan(prefix))


class AsyncIO(SyncIO):
    """Async backends playing `FrameIO`, awaited (each method returns the backend's awaitable)."""

    async def frame_names(self, prefix: str) -> list[str]:  # type: ignore[override]
        return [name async for name, *_ in self._frames.heads(prefix, 1)]

    async def record_names(self, prefix: str) -> list[str]:  # type: ignore[override]
        return [name async for name, *_ in self._records.heads(prefix, 1)]


class PlainFrames:
    """Frames as they are: each operation one call of the store's backend (no witness)."""

    records = None

    def __init__(self, core: StoreCore):
        self.core = core

    def __repr__(self) -> str:
        return "PlainFrames()"

    def hot_path(self, owner: Any, targets: Mapping[Any, Any]) -> HotPath:
        """The sync store's save, load, claim_load and remove: straight-line (`PlainHotPath`)."""
        return PlainHotPath(self.core, owner)

    def save(self, key: str, envelope: Envelope, if_absent: bool, if_match: Token | None) -> Plan[Token]:
        core = self.core
        frame = yield from cpu(core.state_size(envelope), core.build, key, envelope)
        try:
            return (yield from step(FrameIO.frame_put, core.name(key), frame, if_match=if_match, if_absent=if_absent))
        except Exception as exc:
            core.reraise(exc, key, "save")

    def save_many(self, items: Sequence[SaveItem]) -> Plan[list[SaveResult]]:
        """Checked items (`berth._batch.checked`) a chunk at a time: its frames sealed, one `put_many`."""
        core = self.core
        out: list[SaveResult] = []
        for chunk, size in chunks(core, items):
            frames, puts = yield from cpu(size, built, core, chunk)
            try:
                written = (yield from step(FrameIO.frame_put_many, puts)) if puts else []
            except Exception as exc:
                core.reraise(exc, core.many([item.key for item in chunk]), "save")
            out += outcomes(core, chunk, frames, written)
        return out

    def load(self, key: str, allow_expired: bool) -> Plan[Parked | None]:
        core = self.core
        try:
            found = yield from step(FrameIO.frame_get, core.name(key))
        except Exception as exc:
            core.reraise(exc, key, "load")
        size = 0 if found is None else len(found[0])
        return (yield from cpu(size, core.opened, key, found, allow_expired))

    def load_many(self, keys: Sequence[str], names: Sequence[str], allow_expired: bool) -> Plan[list[Parked | None]]:
        core = self.core
        try:
            found = yield from step(FrameIO.frame_get_many, names)
        except Exception as exc:
            core.reraise(exc, core.many(keys), "load")
        size = sum(len(f[0]) for f in found if f is not None)
        return (yield from cpu(size, core.opened_many, keys, found, allow_expired))

    def loaded(self, name: str, data: Data, token: Token, allow_expired: bool) -> Plan[tuple[str, Parked | None]]:
        return (yield from cpu(len(data), self.core.loaded, name, data, token, allow_expired))

    def claim_load(self, key: str) -> Plan[tuple[Parked | None, object]]:
        return (yield from self.load(key, False)), None

    def remove(self, key: str, token: Token, how: str, seen: object = None, whole: bool = False) -> Plan[None]:
        core = self.core
        name = core.delete_name(key, token)
        try:
            yield from step(FrameIO.frame_delete, name, token)
        except Exception as exc:
            core.reraise(exc, key, "delete")

    def delete_rows(self, rows: Sequence[tuple[str, Token]]) -> Plan[int]:
        prefix = self.core.prefix
        return sum((yield from step(FrameIO.frame_delete_many, [(prefix + key, token) for key, token in rows])))

    def sweep_one(self, key: str, token: Token) -> Plan[bool]:
        try:
            yield from step(FrameIO.frame_delete, self.core.prefix + key, token)
        except TokenMismatch:
            return False
        return True

    def reseal_one(self, key: str) -> Plan[bool]:
        core = self.core
        name = core.name(key)
        try:
            found = yield from step(FrameIO.frame_get, name)
        except Exception as exc:
            core.reraise(exc, key, "reseal")
        if found is None:
            return False
        data, token = found
        frame = yield from cpu(len(data), core.resealed, key, data)
        try:
            yield from step(FrameIO.frame_put, name, frame, if_match=token)
        except Exception as exc:
            core.reraise(exc, key, "reseal")
        return True

    def needs_witness(self, what: str) -> NoReturn:
        raise BerthError(
            f"store for identity {self.core.identity!r} has no witness: open it with witness=URL to {what} it"
        )

    def adopt_one(self, key: str, token: Token, size: int) -> NoReturn:
        self.needs_witness("adopt")

    def acknowledge(self, key: str) -> NoReturn:
        self.needs_witness("acknowledge")

    def audit(self) -> NoReturn:
        self.needs_witness("audit")

    def keys_after(self, prefix: str, after: str) -> Iterator[str]:
        """Keys a witness knows under `prefix` after `after`: none, without one."""
        return iter(())

    async def akeys_after(self, prefix: str, after: str) -> AsyncIterator[str]:
        """The same, awaited: none."""
        return
        yield  # an async generator that yields nothing


class HotPath(Protocol):
    """What a sync `Store` runs for save, load and a claim's two steps (`Frames.hot_path`, chosen at open)."""

    def save(self, key: str, envelope: Envelope, if_absent: bool, if_match: Token | None) -> Token: ...
    def load(self, key: str, allow_expired: bool) -> Parked | None: ...
    def claim_load(self, key: str) -> tuple[Parked | None, object]: ...
    def remove(self, key: str, token: Token, how: str, seen: object = None, whole: bool = False) -> None: ...


class PlannedHotPath:
    """A strategy's plans run by the sync driver (`berth._plan.run`): a witnessed store's hot path."""

    __slots__ = ("frames", "targets")

    def __init__(self, frames: Any, targets: Mapping[Any, Any]):
        self.frames, self.targets = frames, targets

    def save(self, key: str, envelope: Envelope, if_absent: bool, if_match: Token | None) -> Token:
        return run(self.frames.save(key, envelope, if_absent, if_match), self.targets)  # type: ignore[no-any-return]

    def load(self, key: str, allow_expired: bool) -> Parked | None:
        return run(self.frames.load(key, allow_expired), self.targets)  # type: ignore[no-any-return]

    def claim_load(self, key: str) -> tuple[Parked | None, object]:
        return run(self.frames.claim_load(key), self.targets)  # type: ignore[no-any-return]

    def remove(self, key: str, token: Token, how: str, seen: object = None, whole: bool = False) -> None:
        run(self.frames.remove(key, token, how, seen, whole), self.targets)


class PlainHotPath:
    """`PlainFrames`' save, load, claim_load and remove as a sync store runs them: the same calls as
    those plans, straight-line, without a generator, a step object or the driver between them.

    Kept, measured (issue 33; `benchmarks/bench_hotpath.py`, CPU per call, memory backend, 1 KiB):
    run as plans, a save cost ~5 µs more than this and a load ~3 µs (a third of a save). The
    backend is read from the store at each call (`owner.backend`), so a backend replaced or patched
    on an open store is the one called, as in the plans (`SyncIO`). An async store awaits the plans.
    """

    __slots__ = ("core", "owner")

    def __init__(self, core: StoreCore, owner: Any):
        self.core, self.owner = core, owner

    def save(self, key: str, envelope: Envelope, if_absent: bool, if_match: Token | None) -> Token:
        core = self.core
        frame = core.build(key, envelope)
        try:
            token: Token = self.owner.backend.put(core.name(key), frame, if_match=if_match, if_absent=if_absent)
        except Exception as exc:
            core.reraise(exc, key, "save")
        return token

    def load(self, key: str, allow_expired: bool) -> Parked | None:
        core = self.core
        try:
            found = self.owner.backend.get(core.name(key))
        except Exception as exc:
            core.reraise(exc, key, "load")
        return core.opened(key, found, allow_expired)

    def claim_load(self, key: str) -> tuple[Parked | None, object]:
        return self.load(key, False), None

    def remove(self, key: str, token: Token, how: str, seen: object = None, whole: bool = False) -> None:
        core = self.core
        name = core.delete_name(key, token)
        try:
            self.owner.backend.delete(name, token)
        except Exception as exc:
            core.reraise(exc, key, "delete")
