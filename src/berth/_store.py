"""The store: a backend, a sealer and an identity, with the semantics of docs/contract.md."""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, Protocol, TypeGuard, TypeVar

from berth._atomic import make_dirs, write_atomic
from berth._codec import (
    MAX_HEADER,
    PREFIX_SIZE,
    Header,
    frame_head,
    header_size,
    open_frame,
    peek_header,
    seal_frame,
)
from berth._envelope import ENVELOPE_VERSION, Envelope
from berth._errors import (
    BackendError,
    BerthError,
    EnvelopeTooLarge,
    Expired,
    FormatError,
    IntegrityError,
    InvalidEnvelope,
    InvalidKey,
    TokenMismatch,
    restated,
    where,
)
from berth._keys import validate_identity, validate_key
from berth._plaintext import PlaintextSealer
from berth._plan import INLINE, Plan, commit, role, run, step
from berth._public import publish
from berth._redact import redact_url
from berth._sealer import PartsSealer, Sealer, as_parts, check_sealer
from berth._time import utcnow
from berth._token import Token
from berth._witness import MAX_SEQ, AuditReport, Snapshot, Witness
from berth.backends import Backend, Data, Head, as_backend, open_backend
from berth.backends._bulk import names_before

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "DEFAULT_MAX_ENVELOPE_BYTES",
    "Listing",
    "Parked",
    "PlaintextWarning",
    "ResealReport",
    "Store",
    "StoreCore",
    "StoreSteps",
    "load_checkpoint",
    "open_store",
    "save_checkpoint",
    "store_sealer",
]

log = logging.getLogger("berth")
T = TypeVar("T")

MAX_STATE_BYTES = 64 * 1024 * 1024
"""The largest `provider_state` the default limit parks (docs/store.md, *Size limit*)."""
_ENVELOPE_ALLOWANCE = 1024 * 1024  # the rest of the envelope beside a state of MAX_STATE_BYTES
DEFAULT_MAX_ENVELOPE_BYTES = MAX_STATE_BYTES + _ENVELOPE_ALLOWANCE
"""The default `max_envelope_bytes`: 65 MiB of envelope JSON, so a 64 MiB state fits with 1 MiB for the rest."""
_CONTROL = re.compile("[\x00-\x1f\x7f]")  # what a key or prefix may not hold
_HEAD_READ = 1024  # bytes read per frame when listing; a longer header falls back to a full read
_DELETE_BATCH = 500  # frames per delete_many call of delete_prefix
_NAMES_KEPT = 4096  # keys whose checked backend name a store keeps (past it, each is checked every time)
_warned_plaintext = False
_warn_lock = threading.Lock()


class PlaintextWarning(UserWarning):
    """A store was opened without a sealer: parked state is stored readable."""


class Parked(NamedTuple):
    """What `load` returns: the envelope and the token that can claim it."""

    envelope: Envelope
    token: Token


@dataclass(frozen=True, slots=True)
class Listing:
    """One parked envelope as `list` sees it, from its cleartext header alone."""

    key: str
    run_id: str
    created_at: datetime
    deadline: datetime | None
    size: int
    labels: Mapping[str, str]
    sealed_by: str
    token: Token
    error: str | None = None
    """None for a readable frame; else why its header cannot be read (the other fields are then
    best-effort: empty strings, no deadline, the epoch as `created_at`). Such a frame is listed,
    never hidden, counted by `berth verify`, and left in place by `sweep`."""


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class ResealReport(int):
    """How many frames `reseal` moved (the int), with `skipped` and `failed` counts."""

    moved: int
    skipped: int
    failed: int

    def __new__(cls, moved: int, skipped: int = 0, failed: int = 0) -> ResealReport:
        self = super().__new__(cls, moved)
        self.moved, self.skipped, self.failed = moved, skipped, failed
        return self

    def __repr__(self) -> str:
        return f"ResealReport(moved={self.moved}, skipped={self.skipped}, failed={self.failed})"


class Unreadable(NamedTuple):
    """In place of a header when enumerating: why this entry's header cannot be read."""

    error: str


def _listing(key: str, header: Header | Unreadable, token: Token, size: int) -> Listing:
    if isinstance(header, Unreadable):
        return Listing(key, "", _EPOCH, None, size, MappingProxyType({}), "", token, header.error)
    return Listing(
        key,
        header.run_id,
        header.created_at,
        header.deadline,
        size,
        MappingProxyType(header.labels),
        header.sealed_by,
        token,
    )


def _why(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _warn_plaintext(where_: str, stacklevel: int = 3) -> None:
    global _warned_plaintext
    with _warn_lock:
        if _warned_plaintext:
            return
        _warned_plaintext = True
    warnings.warn(
        f"berth store {where_} is not sealed: parked state is readable by anyone who can read the storage. "
        "Plaintext is for development; pass sealer=berth.AesGcmSealer(...) or berth.KmsSealer(...)",
        PlaintextWarning,
        stacklevel=stacklevel,
    )


def store_sealer(url: str, identity: str, sealer: Sealer | None) -> Sealer:
    """What a store opened by URL seals with (`open_store` and `berth.aio.open_store` alike): `sealer`,
    or for None `PlaintextSealer()` with a `PlaintextWarning` once per process. Checks the identity
    first (`InvalidKey`, before any I/O)."""
    validate_identity(identity)
    if sealer is None:
        # stacklevel 4: the warning points at the line that called open_store.
        _warn_plaintext(f"at {redact_url(url).partition('://')[0]}:// for identity {identity!r}", stacklevel=4)
        sealer = PlaintextSealer()
    return sealer


def _translate(exc: Exception, identity: str, key: str, what: str) -> Exception:
    """The berth error a backend's `exc` becomes, naming the identity and key (`exc` itself if it already
    names a key). `exc` is never changed."""
    if isinstance(exc, TokenMismatch):
        return TokenMismatch(
            f"{what} lost at {where(identity, key)}: the token no longer matches what is parked",
            identity=identity,
            key=key,
        )
    if isinstance(exc, BerthError):
        if exc.key is not None:
            return exc
        # A backend's or sealer's error names its storage name, not the key: a new error of its
        # class names both (the backend's own is left as it was, as the new one's cause).
        text, named = str(exc), where(identity, key)
        return restated(exc, text if named in text else f"{text} ({named})", identity=identity, key=key)
    return BackendError(
        f"{what} failed at {where(identity, key)}: {type(exc).__name__}: {exc}", identity=identity, key=key
    )


def _reraise(exc: Exception, identity: str, key: str, what: str) -> NoReturn:
    """Raise what `_translate` makes of `exc` (chained to it), or `exc` itself when it already is berth's.

    The hot paths (save, load, delete, seal) call it from a plain `except`: no context-manager
    object per call.
    """
    err = _translate(exc, identity, key, what)
    if err is exc:
        raise exc
    raise err from exc


class _BackendCall:
    """`with`: what the block raises comes out as `_translate` makes it (the hot paths use try/except directly)."""

    __slots__ = ("identity", "key", "what")

    def __init__(self, identity: str, key: str, what: str):
        self.identity, self.key, self.what = identity, key, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        err = _translate(exc, self.identity, self.key, self.what)
        if err is not exc:
            raise err from exc


@role
class StoreSteps(Protocol):
    """The store's steps in plans (`berth._plan.step`): what a claim, a wake, a suspend and the question
    store do to frames. `Store.steps` plays this role; `berth.aio.AsyncStore.steps` plays it awaited."""

    def save(self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None) -> Token:
        """`Store.save`."""
        ...

    def load(self, key: str, *, allow_expired: bool = False) -> Parked | None:
        """`Store.load`."""
        ...

    def claim_load(self, key: str) -> tuple[Parked | None, object]:
        """A claim's load, and what it saw for the claim's delete to reuse (opaque to the plan)."""
        ...

    def remove(self, key: str, token: Token, how: str, seen: object = None) -> None:
        """`Store.delete`, saying how the frame left ("claimed", "expired", "drifted", "deleted"): a
        witnessed store records it; `seen` is what `claim_load` returned beside the envelope."""
        ...


class StoreCore:
    """Every decision a store makes that is not I/O, shared by `Store` and `berth.aio.AsyncStore`.

    Key and identity rules, save conditions, the plaintext policy, frames built and opened
    through the codec and the sealer, deadlines, headers read for a listing, and the
    messages of every error. A store holds one (`store.core`) and does the I/O around it;
    the multi-step protocols (claim, the witness's) are plans over it.
    """

    head_read = _HEAD_READ
    """Bytes read per frame when listing; a longer header is read again, alone."""
    delete_batch = _DELETE_BATCH
    """Frames per `delete_many` call of `delete_prefix`."""

    def __init__(
        self,
        *,
        identity: str,
        sealer: Sealer,
        accept_plaintext: bool = False,
        max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        clock: Callable[[], datetime] | None = None,
        namespace: str | None = None,
    ):
        owner = validate_identity(identity)
        check_sealer(sealer, "sealer")
        if not isinstance(max_envelope_bytes, int) or max_envelope_bytes <= 0:
            raise ValueError("max_envelope_bytes must be a positive int")
        # A namespace (`questions`) is another frame identity: `pr-bot:questions`. No identity holds
        # ':', so no envelope's name or frame can ever be one of the namespace's.
        self.identity = owner if namespace is None else f"{owner}:{namespace}"
        self.prefix = self.identity + "/"
        # Fixed at open, like the plaintext policy below: a guarantee that could be switched off
        # after the fact (`store.accept_plaintext = True`) would be no guarantee.
        self.sealer = sealer
        self.accept_plaintext = bool(accept_plaintext)
        self.max_envelope_bytes = max_envelope_bytes
        self.clock = clock or utcnow
        self._plaintext = isinstance(sealer, PlaintextSealer)
        self._parts = as_parts(sealer)  # the declared fast path (adapted once for a sealer without it)
        self._plaintext_parts: PartsSealer = self._parts if self._plaintext else PlaintextSealer()
        self.witness: Witness | None = None
        """The witness hooks (berth._witness): None keeps every call exactly as without one."""
        self._names: dict[str, str] = {}  # key -> backend name, checked: a store names the same few keys

    def reraise(self, exc: Exception, key: str, what: str) -> NoReturn:
        """Raise what a failure of `what` at `key` becomes: a berth error naming this identity and `key`."""
        _reraise(exc, self.identity, key, what)

    @staticmethod
    def listing(key: str, header: Header | Unreadable, token: Token, size: int) -> Listing:
        """The `Listing` of one frame, from its header (or why it cannot be read)."""
        return _listing(key, header, token, size)

    def name(self, key: str) -> str:
        """The backend name of `key` (checked by the key rules first; raises `InvalidKey`)."""
        if type(key) is str:  # a str subclass could hash and compare as it likes: never cached
            name = self._names.get(key)
            if name is not None:
                return name
        name = self.prefix + validate_key(key, self.identity)
        if type(key) is str and len(self._names) < _NAMES_KEPT:
            self._names[key] = name
        return name

    def sealer_for(self, header: Header, key: str) -> PartsSealer:
        """The sealer that opens a frame with `header`: the plaintext policy (no silent downgrade)."""
        if header.sealer == PlaintextSealer.name:
            if self._plaintext or self.accept_plaintext:
                return self._plaintext_parts
            raise IntegrityError(
                f"plaintext frame at {where(self.identity, key)} refused by a sealed store (no silent downgrade); "
                "to migrate legacy frames open the store with accept_plaintext=True and reseal",
                identity=self.identity,
                key=key,
            )
        if self.sealer.can_open(header.sealer, header.key_id):
            return self._parts
        if self._plaintext:
            raise IntegrityError(
                f"frame at {where(self.identity, key)} is sealed by {header.sealer} key {header.key_id!r}; "
                "this store is plaintext: open it with a sealer holding that key",
                identity=self.identity,
                key=key,
            )
        raise IntegrityError(
            f"frame at {where(self.identity, key)} is sealed by {header.sealer} key {header.key_id!r}, "
            f"which {type(self.sealer).__name__} does not hold: add that key to open it",
            identity=self.identity,
            key=key,
        )

    def open(self, key: str, data: bytes | memoryview) -> Envelope:
        """Authenticate and open a frame to its envelope, through the codec and the sealer it names."""
        return open_frame(data, identity=self.identity, key=key, sealer_for=lambda header: self.sealer_for(header, key))

    def build(self, key: str, env: Envelope) -> bytes:
        if type(env) is not Envelope or env.version != ENVELOPE_VERSION:
            self.check_envelope(key, env)  # raises, with the message, unless a subclass passes
        return self.seal(key, env, env.created_at or self.clock())

    def check_envelope(self, key: str, env: Envelope) -> None:
        if not isinstance(env, Envelope):
            raise InvalidEnvelope(
                f"save at {where(self.identity, key)} needs a berth.Envelope, got {type(env).__name__}",
                identity=self.identity,
                key=key,
            )
        if env.version != ENVELOPE_VERSION:
            raise InvalidEnvelope(
                f"envelope for {where(self.identity, key)} has version {env.version}; "
                f"this berth parks version {ENVELOPE_VERSION}",
                identity=self.identity,
                key=key,
            )

    @staticmethod
    def state_size(env: Envelope) -> int:
        """The bytes of `env`'s state: what sealing it costs, to decide whether async work leaves the loop."""
        state = getattr(env, "provider_state", b"")
        return len(state) if isinstance(state, (bytes, bytearray, memoryview)) else 0

    def witness_build(self, key: str, env: Envelope) -> Callable[[int], bytes]:
        """What a witnessed save seals once it has its sequence number; every check made now, before any I/O."""
        self.check_envelope(key, env)
        created_at = env.created_at or self.clock()
        limits = {"sealer": self._parts, "max_bytes": self.max_envelope_bytes}
        frame_head(env, identity=self.identity, key=key, created_at=created_at, seq=MAX_SEQ, **limits)  # type: ignore[arg-type]
        return functools.partial(self.seal, key, env, created_at)

    def seal(self, key: str, env: Envelope, created_at: datetime, seq: int | None = None) -> bytes:
        try:
            return seal_frame(
                env,
                identity=self.identity,
                key=key,
                created_at=created_at,
                sealer=self._parts,
                max_bytes=self.max_envelope_bytes,
                seq=seq,
            )
        except EnvelopeTooLarge:
            raise
        except Exception as exc:
            _reraise(exc, self.identity, key, "seal")

    def check_condition(self, key: str, if_absent: bool, if_match: Token | None) -> None:
        """Refuse, before any I/O, a save condition that can never hold."""
        if if_match is None:
            return
        if not isinstance(if_match, Token) or if_match.is_zero:
            raise TokenMismatch(
                f"save at {where(self.identity, key)} with if_match the zero token (or not a token): "
                "load first to get a token",
                identity=self.identity,
                key=key,
            )
        if if_absent:
            raise TokenMismatch(
                f"save at {where(self.identity, key)} cannot be both if_absent and if_match: nothing is both",
                identity=self.identity,
                key=key,
            )

    def names(self, keys: Sequence[str]) -> tuple[list[str], list[str]]:
        """The keys as a list and their backend names, every key checked before any I/O."""
        if isinstance(keys, str):
            raise InvalidKey(f"load_many takes a sequence of keys, not one key {keys!r}", identity=self.identity)
        keys = list(keys)
        return keys, [self.name(key) for key in keys]

    @staticmethod
    def many(keys: Sequence[str]) -> str:
        return keys[0] if len(keys) == 1 else f"{keys[0]} (+{len(keys) - 1} more)"

    def opened_many(
        self, keys: Sequence[str], found: Sequence[tuple[Data, Token] | None], allow_expired: bool
    ) -> list[Parked | None]:
        return [self.opened(key, one, allow_expired) for key, one in zip(keys, found, strict=True)]

    def opened(self, key: str, found: tuple[Data, Token] | None, allow_expired: bool) -> Parked | None:
        """What `load` returns for what the backend found under `key`: the envelope opened, or Expired."""
        if found is None:
            return None
        data, token = found
        del found
        return self._parked(key, data, token, allow_expired)

    def loaded(self, name: str, data: Data, token: Token, allow_expired: bool) -> tuple[str, Parked]:
        """`(key, Parked)` of one row of an ordered load (`load_prefix`): opened and checked as `load` does."""
        key = name[len(self.prefix) :]
        return key, self._parked(key, data, token, allow_expired)

    def _parked(self, key: str, data: Data, token: Token, allow_expired: bool) -> Parked:
        """The frame `data` at `key` opened, as Parked with `token`; Expired past its deadline unless allowed."""
        parked = Parked(self.open(key, data), token)
        del data  # the sealed frame is not needed any more (the caller has let go of it too)
        if not allow_expired and parked.envelope.deadline is not None:
            self.check_deadline(key, parked)
        return parked

    def check_deadline(self, key: str, parked: Parked) -> None:
        """Raise `Expired` (with the token, so a claim can remove it) if `parked` is past its deadline."""
        env = parked.envelope
        if env.deadline is not None and self.clock() > env.deadline:
            raise Expired(
                f"envelope at {where(self.identity, key)} passed its deadline "
                f"{env.deadline.isoformat()}: never resumed",
                identity=self.identity,
                key=key,
                deadline=env.deadline,
                token=parked.token,
            )

    def delete_name(self, key: str, token: Token) -> str:
        """The backend name to delete `key` at, once the key and the token are checked (before any I/O)."""
        name = self.name(key)
        if not isinstance(token, Token) or token.is_zero:
            raise TokenMismatch(
                f"delete at {where(self.identity, key)} with the zero token: load first to get a token",
                identity=self.identity,
                key=key,
            )
        return name

    def claim_plan(self, key: str) -> Plan[Envelope | None]:
        """Claim as a plan of store steps, run by `claim` here and awaited by `berth.aio.AsyncStore.claim`."""
        try:
            parked, seen = yield from step(StoreSteps.claim_load, key)
        except Expired as exc:
            assert exc.token is not None
            try:
                yield from step(StoreSteps.remove, key, exc.token, "expired")
            except TokenMismatch:
                pass
            raise
        if parked is None:
            return None
        try:  # the commit point; cancelled before it is known (berth.aio), the run is handed back
            yield from commit(
                step(StoreSteps.remove, key, parked.token, "claimed", seen),
                undo=lambda _: self.handback(key, parked.envelope),
                delivers=True,
            )
        except TokenMismatch:
            return None
        deadline = parked.envelope.deadline
        if deadline is not None and self.clock() > deadline:
            # The deadline passed between the check and the commit: removed, never handed out.
            raise Expired(
                f"envelope at {where(self.identity, key)} passed its deadline {deadline.isoformat()} "
                "while it was being claimed: removed, never resumed",
                identity=self.identity,
                key=key,
                deadline=deadline,
                token=parked.token,
            )
        return parked.envelope

    def handback(self, key: str, envelope: Envelope) -> Plan[None]:
        """Park `envelope` again under `key` (`if_absent`: superseding nothing newer): the undo of a claim or
        wake whose caller was cancelled before it could be handed the run (`berth._plan.commit`).

        A run past its deadline is not put back (it would never resume); a failure is logged, not raised
        (the caller's cancellation is what it raises).
        """
        deadline = envelope.deadline
        if deadline is not None and self.clock() > deadline:
            return None
        try:
            yield from step(StoreSteps.save, key, envelope, if_absent=True)
        except TokenMismatch:
            log.info("berth: %s was parked again while a cancelled claim held its run: the newer one stays",
                     where(self.identity, key))  # fmt: skip
        except Exception as exc:
            log.error("berth: a cancelled claim at %s could not put its run back, which is lost: %s",
                      where(self.identity, key), exc)  # fmt: skip
        else:
            log.info("berth: a claim at %s was cancelled before it returned: the run is parked again",
                     where(self.identity, key))  # fmt: skip
        return None

    @staticmethod
    def header_size(head: Data) -> int:
        need = header_size(head)
        assert need is not None
        return need

    @staticmethod
    def needs_full(head: object) -> TypeGuard[Data]:
        """Whether `head` (a frame's first bytes) is cut short of the frame's whole header."""
        if not isinstance(head, (bytes, memoryview)):
            return False
        need = header_size(head)
        # A length past any header berth writes is not read at all: peek_header refuses it.
        return need is not None and len(head) < need <= PREFIX_SIZE + MAX_HEADER

    def peeked(
        self, name: str, head: Data | BerthError, token: Token, size: int
    ) -> tuple[str, Header | Unreadable, Token, int]:
        """(key, header or `Unreadable` saying why, token, size) of the frame named `name`.

        `head` may be the error a backend met reading this one entry.
        """
        key = name[len(self.prefix) :]
        if isinstance(head, BerthError):  # the backend could not read this entry
            return key, Unreadable(_why(head)), token, size
        try:
            header, _ = peek_header(head, self.identity, key)
            if header.identity != self.identity or header.key != key:
                raise IntegrityError(
                    f"frame at {where(self.identity, key)} was written for identity {header.identity!r}, "
                    f"key {header.key!r}: moved or swapped",
                    identity=self.identity,
                    key=key,
                )
        except (FormatError, IntegrityError) as exc:
            log.warning("berth: unreadable frame: %s", exc)
            return key, Unreadable(_why(exc)), token, size
        except (TypeError, ValueError) as exc:  # a value of another type where bytes belong
            log.warning("berth: unreadable frame at %s: %s", where(self.identity, key), type(exc).__name__)
            return key, Unreadable(f"not a berth frame ({type(exc).__name__})"), token, size
        return key, header, token, size

    def check_list(self, prefix: str, limit: int | None) -> None:
        self.check_prefix(prefix)
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"list limit must be a positive int or None, got {limit!r}")

    def check_prefix(self, prefix: str) -> None:
        if not isinstance(prefix, str) or prefix.startswith("/") or _CONTROL.search(prefix):
            raise InvalidKey(f"invalid prefix {prefix!r} for identity {self.identity!r}", identity=self.identity)

    def sweep_now(self, now: datetime | None) -> datetime:
        now = now or self.clock()
        if now.tzinfo is None:
            raise InvalidEnvelope("sweep(now=...) needs an aware datetime")
        return now

    @staticmethod
    def is_expired(header: Header | Unreadable, now: datetime) -> bool:
        """Past its deadline; an unreadable frame never is (a sweep leaves it in place)."""
        return isinstance(header, Header) and header.deadline is not None and now > header.deadline

    def reseal_tally(self) -> _ResealTally:
        return _ResealTally(f"{self.sealer.name}:{self.sealer.key_id}")

    def resealed(self, key: str, data: Data) -> bytes:
        """The frame `data` (parked under `key`) opened and sealed again by the current sealer."""
        env = self.open(key, data)
        del data
        assert env.created_at is not None
        return self.seal(key, env, env.created_at)


class Store:
    """Parks sealed envelopes under keys of one identity, in one backend.

    Safe to share between threads. Open one with `berth.open_store(url, ...)`,
    or wrap a backend of your own: `Store(backend, identity="pr-bot", sealer=...)`.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        identity: str,
        sealer: Sealer | None = None,
        accept_plaintext: bool = False,
        max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        clock: Callable[[], datetime] | None = None,
        witness: Backend | None = None,
        namespace: str | None = None,
    ):
        if sealer is None:
            _warn_plaintext(f"for identity {identity!r}")
            sealer = PlaintextSealer()
        self.core = StoreCore(
            identity=identity,
            sealer=sealer,
            accept_plaintext=accept_plaintext,
            max_envelope_bytes=max_envelope_bytes,
            clock=clock,
            namespace=namespace,
        )
        """Every decision this store makes that is not I/O (shared with `berth.aio.AsyncStore`)."""
        self.backend = as_backend(backend)
        if witness is not None:
            self.core.witness = Witness(as_backend(witness), identity=self.core.identity, sealer=sealer)
        self.steps: StoreSteps = _Steps(self)
        """This store playing `StoreSteps` in plans (a claim's, a coordinator's, the question store's)."""
        self._targets = {StoreSteps: self.steps}

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

    def __repr__(self) -> str:
        return f"Store({type(self.backend).__name__}, identity={self.identity!r}, sealer={self.sealer!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the backend's connections (and the witness's)."""
        self.backend.close()
        if self.core.witness is not None:
            self.core.witness.backend.close()

    def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent); backends that need none do nothing.

        Backends with a schema (PostgreSQL) also run it lazily on first use; call it at deploy
        time to fail early, or with a role that may create tables.

        Raises:
            BackendError: the migration failed.
        """
        with self._backend_call("*", "setup"):
            self.backend.setup()

    def now(self) -> datetime:
        """The store's clock (injectable for tests)."""
        return self.core.clock()

    def check_key(self, key: str) -> str:
        """Return `key` if this store accepts it (the key rules of docs/contract.md); no I/O.

        Raises:
            InvalidKey: the key breaks a rule; the message names the rule.
        """
        return validate_key(key, self.identity)

    # --- helpers -----------------------------------------------------------------------

    def _backend_call(self, key: str, what: str) -> _BackendCall:
        """A `with` block whose errors come out as berth errors naming this store's identity and `key`."""
        return _BackendCall(self.identity, key, what)

    # --- the contract ------------------------------------------------------------------

    def save(self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None) -> Token:
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
        name = self.core.name(key)
        self.core.check_condition(key, if_absent, if_match)
        if self.core.witness is not None:
            build = self.core.witness_build(key, envelope)
            plan = self.core.witness.save(
                self.core, key, build, if_absent, if_match, size=self.core.state_size(envelope)
            )
            return self._witnessed(key, "save", plan)
        frame = self.core.build(key, envelope)
        try:
            return self.backend.put(name, frame, if_match=if_match, if_absent=if_absent)
        except Exception as exc:
            _reraise(exc, self.identity, key, "save")

    def load(self, key: str, *, allow_expired: bool = False) -> Parked | None:
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
        if self.core.witness is not None:
            return self._witnessed(key, "load", self.core.witness.load(self.core, key, allow_expired))
        name = self.core.name(key)
        try:
            found = self.backend.get(name)
        except Exception as exc:
            _reraise(exc, self.identity, key, "load")
        return self.core.opened(key, found, allow_expired)

    def load_many(self, keys: Sequence[str], *, allow_expired: bool = False) -> list[Parked | None]:
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
        if self.core.witness is not None:
            return [self.load(key, allow_expired=allow_expired) for key in keys]
        try:
            found = self.backend.get_many(names)
        except Exception as exc:
            _reraise(exc, self.identity, self.core.many(keys), "load")
        return self.core.opened_many(keys, found, allow_expired)

    def _witnessed(self, key: str, what: str, plan: Plan[T]) -> T:
        """Run a witness plan (berth._witness) over this store's backend and its witness's."""
        assert self.core.witness is not None
        try:
            return run(plan, self.core.witness.targets(self.backend, INLINE))
        except Exception as exc:
            _reraise(exc, self.identity, key, what)

    def delete(self, key: str, token: Token) -> None:
        """Remove the envelope under `key` only if `token` is still its current generation.

        Args:
            key: the suspension's name within this identity.
            token: the token a `load` returned.

        Raises:
            InvalidKey: the key breaks the key rules (before any I/O).
            TokenMismatch: the token is stale, zero, or nothing is parked.
            BackendError: the backend failed; the envelope may or may not be gone.
        """
        self._remove(key, token, "deleted")

    def _remove(self, key: str, token: Token, how: str, seen: object = None, *, whole: bool = False) -> None:
        """`delete`, saying how the frame left (`StoreSteps.remove`); `whole`: read the frame whole (a sweep
        or a prefix delete) rather than by its head."""
        if self.core.witness is not None:
            seen = seen if isinstance(seen, Snapshot) else None
            self._witnessed(key, how, self.core.witness.leave(self.core, key, token, how, seen, whole=whole))
            return
        name = self.core.delete_name(key, token)
        try:
            self.backend.delete(name, token)
        except Exception as exc:
            _reraise(exc, self.identity, key, "delete")

    def claim(self, key: str) -> Envelope | None:
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
        return run(self.core.claim_plan(key), self._targets)

    def _claim_load(self, key: str) -> tuple[Parked | None, object]:
        """A claim's load, and with a witness the snapshot it judged (its `_remove` reuses it)."""
        if self.core.witness is not None:
            return self._witnessed(key, "load", self.core.witness.load_seen(self.core, key, False))
        return self.load(key), None

    def _heads(
        self, prefix: str, *, ordered: bool = False, limit: int | None = None, reverse: bool = False
    ) -> Iterator[tuple[str, Header | Unreadable, Token, int]]:
        """(key, header, token, size) of every frame under `prefix`, one at a time.

        One bad entry never stops the walk: a frame whose header cannot be read (or a value
        that is not a frame at all) comes out with an `Unreadable` saying why in place of its
        header. Only a failure of the backend itself (`BackendError`) ends it.
        """
        full_prefix = self.core.prefix + prefix
        rows: Iterator[Head]
        if ordered:
            rows = self.backend.sorted_heads(full_prefix, _HEAD_READ, limit=limit, reverse=reverse)
        else:
            rows = self.backend.heads(full_prefix, _HEAD_READ)
        for name, head, token, size in rows:
            if self.core.needs_full(head):
                # A header longer than the first read: read just the header, never the frame.
                found = self.backend.head(name, self.core.header_size(head))
                if found is None:
                    continue
                head, token = found
            yield self.core.peeked(name, head, token, size)

    def list(self, prefix: str = "", *, limit: int | None = None, reverse: bool = False) -> Iterator[Listing]:
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

    def _listings(self, prefix: str, limit: int | None, reverse: bool) -> Iterator[Listing]:
        with self._backend_call(prefix or "*", "list"):
            for key, header, token, size in self._heads(prefix, ordered=True, limit=limit, reverse=reverse):
                yield _listing(key, header, token, size)

    def load_prefix(
        self,
        prefix: str = "",
        *,
        limit: int | None = None,
        reverse: bool = False,
        allow_expired: bool = False,
        before: str | None = None,
    ) -> Iterator[tuple[str, Parked]]:
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

    def _loaded(
        self, prefix: str, limit: int | None, reverse: bool, allow_expired: bool, before: str | None = None
    ) -> Iterator[tuple[str, Parked]]:
        core = self.core
        with self._backend_call(prefix or "*", "load"):
            if core.witness is not None:  # each frame judged by the witness against its record
                heads = self._heads(prefix, ordered=True, limit=None if before else limit, reverse=reverse)
                for key in names_before((key for key, *_ in heads), before, limit):
                    parked = self.load(key, allow_expired=allow_expired)
                    if parked is not None:
                        yield key, parked
                return
            bounded = {} if before is None else {"before": core.prefix + before}
            rows = self.backend.sorted_frames(core.prefix + prefix, limit=limit, reverse=reverse, **bounded)
            for name, data, token in rows:
                yield core.loaded(name, data, token, allow_expired)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every envelope whose key starts with `prefix`, each only if unchanged since read.

        An envelope re-saved meanwhile survives (as in `sweep`); frames that do not open
        are deleted too. `"thread-1/"` removes a thread's keys; `"thread-1"` would also
        remove `thread-10`'s. An empty prefix empties the identity. Needs no keys.
        Batched where the backend can (one transaction or statement per 500 on SQLite,
        PostgreSQL and Redis).

        Returns:
            How many envelopes were deleted.

        Raises:
            InvalidKey: a prefix with control characters or a leading "/" (before any I/O).
            BackendError: the backend failed; some envelopes may be gone.
        """
        self.core.check_prefix(prefix)
        removed = 0
        batch: list[tuple[str, Token]] = []
        with self._backend_call(prefix or "*", "delete_prefix"):
            for key, _header, token, _ in self._heads(prefix):
                if token.is_zero:  # a value the backend could not read as one of its records
                    continue
                if self.core.witness is not None:  # one witnessed delete each: the witness records how it left
                    removed += self._removed(key, token, "deleted")
                    continue
                batch.append((self.core.prefix + key, token))
                if len(batch) >= _DELETE_BATCH:
                    removed += sum(self.backend.delete_many(batch))
                    batch = []
            if batch:
                removed += sum(self.backend.delete_many(batch))
        return removed

    def sweep(self, now: datetime | None = None, *, on_removed: Callable[[Listing], None] | None = None) -> int:
        """Delete every envelope past its deadline, each only if unchanged since read.

        Streams: memory stays bounded however many frames are parked or expired. An
        envelope re-saved during the sweep survives; a frame whose header cannot be read
        is left in place (`list` shows it). Needs no keys.

        Args:
            now: the instant to compare deadlines with (default: the store's clock).
            on_removed: called with each removed envelope's listing, right after its delete.

        Returns:
            How many envelopes were deleted.

        Raises:
            InvalidEnvelope: `now` is a naive datetime.
            BackendError: the backend failed (what was deleted before stays deleted).
        """
        now = self.core.sweep_now(now)
        removed = 0
        with self._backend_call("*", "sweep"):
            for key, header, token, size in self._heads(""):
                if not self.core.is_expired(header, now):
                    continue
                if self.core.witness is not None:
                    if not self._removed(key, token, "swept"):
                        continue
                else:
                    try:
                        self.backend.delete(self.core.prefix + key, token)
                    except TokenMismatch:
                        continue
                removed += 1
                if on_removed is not None:
                    on_removed(_listing(key, header, token, size))
        return removed

    def _removed(self, key: str, token: Token, how: str) -> bool:
        """`remove`, True if it removed the frame, False if the token no longer matched."""
        try:
            self._remove(key, token, how, whole=True)
        except TokenMismatch:
            return False
        return True

    def reseal(self) -> ResealReport:
        """Re-seal every envelope not sealed by the sealer's current key.

        Each is written back only if unchanged since it was read: a concurrent save wins.

        Returns:
            How many frames moved (an int), with `.skipped` (changed meanwhile) and
            `.failed` (could not be opened) counts.
        """
        tally = self.core.reseal_tally()
        for key, header, _, _ in self._heads(""):
            if not tally.wants(key, header):
                continue
            try:
                outcome: BaseException | bool = self._reseal_one(key)
            except Exception as exc:
                outcome = exc
            tally.record(key, outcome)
        return tally.report()

    def _reseal_one(self, key: str) -> bool:
        name = self.core.name(key)
        with self._backend_call(key, "reseal"):
            found = self.backend.get(name)
        if found is None:
            return False
        data, token = found
        if self.core.witness is not None:  # a new sequence number, and never for a frame the witness refuses
            env = self.core.open(key, data)
            assert env.created_at is not None
            build = functools.partial(self.core.seal, key, env, env.created_at)
            self._witnessed(key, "reseal", self.core.witness.save(self.core, key, build, False, token, strict=True))
            return True
        frame = self.core.resealed(key, data)
        with self._backend_call(key, "reseal"):
            self.backend.put(name, frame, if_match=token)
        return True

    def adopt(self) -> int:
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
        witness = self._needs_witness("adopt")
        adopted = 0
        for key, header, token, size in self._heads(""):
            if isinstance(header, Unreadable) or header.seq is not None:
                continue
            with self._backend_call(key, "adopt"):
                found = self.backend.get(self.core.name(key))
            if found is None or found[1] != token:
                continue  # changed since listed: a witnessed writer got there first
            try:
                env = self.core.open(key, found[0])
            except (IntegrityError, FormatError):
                continue  # does not open: left for audit to report
            assert env.created_at is not None
            build = functools.partial(self.core.seal, key, env, env.created_at)
            plan = witness.save(self.core, key, build, False, token, size=size, adopting=True)
            try:
                self._witnessed(key, "adopt", plan)
            except TokenMismatch:
                continue
            adopted += 1
        return adopted

    def acknowledge(self, key: str) -> bool:
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
        witness = self._needs_witness("acknowledge")
        self.core.name(key)
        return self._witnessed(key, "acknowledge", witness.acknowledge(self.core, key))

    def _needs_witness(self, what: str) -> Witness:
        if self.core.witness is None:
            raise BerthError(
                f"store for identity {self.identity!r} has no witness: open it with witness=URL to {what} it"
            )
        return self.core.witness

    def audit(self) -> AuditReport:
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
        witness = self._needs_witness("audit")
        with self._backend_call("*", "audit"):
            return witness.audit(self)


class _Steps:
    """A `Store` playing `StoreSteps`: its own methods, bound once (no call of its own per step)."""

    __slots__ = ("claim_load", "load", "remove", "save")

    def __init__(self, store: Store):
        self.save = store.save
        self.load = store.load
        self.claim_load = store._claim_load
        self.remove = store._remove


class _ResealTally:
    """What a reseal did, frame by frame: the sync and async reseal count the same way."""

    def __init__(self, current: str):
        self.current = current
        self.moved = self.skipped = self.failed = 0

    def wants(self, key: str, header: Header | Unreadable) -> bool:
        """Whether the frame under `key` needs resealing (an unreadable one counts as failed)."""
        if not isinstance(header, Header):
            self.failed += 1
            return False
        return header.sealed_by != self.current

    def record(self, key: str, outcome: BaseException | bool) -> None:
        """Count one attempt: True moved, False gone meanwhile, or what it raised."""
        if outcome is True:
            self.moved += 1
        elif outcome is False or isinstance(outcome, TokenMismatch):
            self.skipped += 1
        elif isinstance(outcome, (IntegrityError, FormatError)):
            log.warning("berth: reseal could not open a frame: %s", outcome)
            self.failed += 1
        else:
            raise outcome

    def report(self) -> ResealReport:
        return ResealReport(self.moved, self.skipped, self.failed)


def open_store(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
    clock: Callable[[], datetime] | None = None,
    witness: str | Backend | None = None,
    **options: Any,
) -> Store:
    """Open a store by URL: memory://, file:///dir, sqlite:////abs/file.db, postgresql://, redis://, gs://, s3://.

    Args:
        url: where frames live; a scheme whose extra is not installed names the extra.
        identity: the namespace of one agent, tenant or service.
        sealer: None means `PlaintextSealer()`, with a warning once (development only).
        accept_plaintext: let a sealed store read legacy plaintext frames, to `reseal` them.
        max_envelope_bytes: refuse envelopes whose JSON (before sealing) is larger than this;
            the default, 65 MiB, takes a 64 MiB `provider_state` with 1 MiB for the rest.
        clock: returns "now" as an aware datetime (tests inject one).
        witness: a second backend URL (or a backend), ideally in another trust domain, where
            berth records the latest frame of each key and how it left; load and claim then
            refuse a frame that is not the latest, and `audit()` finds deleted, replayed and
            rolled-back frames (docs/store.md, "The witness"). Opened with no options.
        **options: passed to the backend.

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    sealer = store_sealer(url, identity, sealer)
    witness_backend = open_backend(witness) if isinstance(witness, str) else witness
    backend = open_backend(url, **options)
    return Store(
        backend,
        identity=identity,
        sealer=sealer,
        accept_plaintext=accept_plaintext,
        max_envelope_bytes=max_envelope_bytes,
        clock=clock,
        witness=witness_backend,
    )


# --- one frame at a path -----------------------------------------------------------------

_CHECKPOINT_IDENTITY = "checkpoint"


def _checkpoint_store(path: Path, sealer: Sealer | None) -> tuple[Store, str]:
    from berth.backends.memory import MemoryBackend

    if sealer is None:
        _warn_plaintext(f"at checkpoint {path.name!r}")
        sealer = PlaintextSealer()
    return Store(MemoryBackend(), identity=_CHECKPOINT_IDENTITY, sealer=sealer), validate_key(path.name)


def save_checkpoint(path: str | os.PathLike[str], envelope: Envelope, *, sealer: Sealer | None = None) -> None:
    """Write one sealed frame to `path` (0600, atomic, fsynced, missing directories 0700); bound to the file's name.

    Raises:
        InvalidEnvelope, EnvelopeTooLarge: as `Store.save`.
        BackendError: the file could not be written; any previous file is intact.
    """
    from pathlib import Path  # imported here: `import berth` stays without pathlib

    path = Path(path)
    store, key = _checkpoint_store(path, sealer)
    frame = store.core.build(key, envelope)
    try:
        make_dirs(path.parent)
        write_atomic(path, frame)
    except OSError as exc:
        raise BackendError(f"cannot write checkpoint {str(path)!r}: {exc.strerror or exc}") from exc


def load_checkpoint(
    path: str | os.PathLike[str], *, sealer: Sealer | None = None, allow_expired: bool = False
) -> Envelope:
    """Read and open the frame at `path` written by `save_checkpoint`.

    Raises:
        FileNotFoundError: nothing at `path`.
        Expired: past its deadline (unless `allow_expired`).
        IntegrityError, FormatError: as `Store.load`.
    """
    from pathlib import Path  # imported here: `import berth` stays without pathlib

    path = Path(path)
    store, key = _checkpoint_store(path, sealer)
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO would block the read forever
            raise IntegrityError(
                f"checkpoint {str(path)!r} is not a regular file", identity=_CHECKPOINT_IDENTITY, key=key
            )
        data = f.read()
    store.backend.put(store.core.prefix + key, data)
    parked = store.load(key, allow_expired=allow_expired)
    assert parked is not None
    return parked.envelope


publish(globals())  # its public names read as berth.X
