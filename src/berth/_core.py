"""The store's core: every decision a store makes that is not I/O, shared by `Store` and `AsyncStore`.

Key and identity rules, save conditions, the plaintext policy, frames built and opened through the
codec and the sealer, deadlines, headers read for a listing, the messages of every error, and the
claim as a plan over `StoreSteps`. It knows nothing of witnesses: how frames are written and read
(plainly, or witnessed) is a strategy chosen at open (`berth._frames`, `berth._witnessed`).
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import NamedTuple, NoReturn, Protocol, TypeGuard, TypeVar

from berth._codec import MAX_HEADER, PREFIX_SIZE, Header, header_size, open_frame, peek_header, seal_frame
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
from berth._plan import Plan, commit, role, step
from berth._public import publish
from berth._redact import redact_url
from berth._sealer import PartsSealer, Sealer, as_parts, check_sealer
from berth._time import utcnow
from berth._token import Token
from berth.backends import Data

__all__ = [
    "DEFAULT_MAX_ENVELOPE_BYTES",
    "MAX_STATE_BYTES",
    "Listing",
    "Parked",
    "PlaintextWarning",
    "ResealReport",
    "StoreCore",
    "StoreSteps",
    "Unreadable",
    "store_sealer",
    "warn_plaintext",
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


def warn_plaintext(where_: str, stacklevel: int = 3) -> None:
    """Warn once per process that a store (or checkpoint) at `where_` is not sealed (`PlaintextWarning`)."""
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
        warn_plaintext(f"at {redact_url(url).partition('://')[0]}:// for identity {identity!r}", stacklevel=4)
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
    save_batch = 500
    """Items per `put_many` call of `save_many` (a chunk: SQLite's and PostgreSQL's transaction, Redis's pipeline)."""

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
        self._names: dict[str, str] = {}  # key -> backend name, checked: a store names the same few keys

    @property
    def parts(self) -> PartsSealer:
        """The sealer's fast path (`berth._sealer.as_parts`), what frames are sealed with."""
        return self._parts

    def call(self, key: str, what: str) -> _BackendCall:
        """A `with` block whose errors come out as berth errors naming this identity and `key`."""
        return _BackendCall(self.identity, key, what)

    def reraise(self, exc: Exception, key: str, what: str) -> NoReturn:
        """Raise what a failure of `what` at `key` becomes: a berth error naming this identity and `key`."""
        _reraise(exc, self.identity, key, what)

    def error(self, exc: BerthError, key: str, what: str) -> BerthError:
        """What a failure of `what` at `key` becomes when it is reported, not raised (`save_many`'s outcomes)."""
        err = _translate(exc, self.identity, key, what)
        if err is not exc:
            err.__cause__ = exc
        return err  # type: ignore[return-value]  # a berth error stays one (of its own class)

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

    def check_key(self, key: str) -> str:
        """`key`, checked by the key rules (raises `InvalidKey`), through the cache `name` keeps."""
        self.name(key)
        return key

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

    def check_walk(self, prefix: str, after: str | None) -> None:
        """A bulk walk's `prefix` and `after` (the key it resumes after), checked before any I/O."""
        self.check_prefix(prefix)
        if after is not None:
            self.check_prefix(after)

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


publish(globals())  # its public names read as berth.X
