"""The witness: a second backend where berth records, sealed, the latest frame of each key and how it left.

A frame proves itself, not that it is the latest one for its key. A store opened with `witness=URL` keeps,
for each key, one *record* in that second backend (named `{identity}:witness/{key}`, sealed by the store's
sealer and bound to identity and key as associated data: no edit, forgery or move without the keys):

    seq, digest, token   the newest frame the witness saw land: its sequence number (also in
                         the frame's authenticated header), the SHA-256 of its bytes, and the
                         store generation it landed at
    state                parked, or how it left: claimed, expired, drifted, swept, deleted
    pending              (seq, digest) of frames being written, not yet seen landed
    leave                (seq, how): a claim, sweep or delete of that frame has begun
    top                  the highest sequence number handed out for the key

Records are per key, each written by compare-and-swap on the witness backend's own
generation, so a key's sequence numbers only grow. The frame's header carries the same `seq`, so
each side checks the other: replayed (a lower `seq` than the record's), missing (gone while the
record says parked), unknown (a frame the record never named, or a record rolled back).

Write order (each step durable before the next: a save records its candidate, writes the frame, records
that it landed; a leave records its intent, deletes, records how the frame left), why a SIGKILL anywhere
is safe, and why a save reads only a settled record (`_expected`): docs/store.md, "The witness".

A load reads the frame, then the record, and judges; a bad verdict is reported only if the frame did not
change meanwhile (a concurrent save or claim is never taken for an attack). All I/O here is plans over
`berth._frames.FrameIO`, taking a store's core, never a store: `berth._witnessed.WitnessedFrames` runs them.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from berth._codec import FORMAT_VERSION, MAGIC, MAX_HEADER, PREFIX_SIZE, build_aad, header_size, peek_header
from berth._core import Parked, StoreCore
from berth._errors import BackendError, BerthError, FormatError, IntegrityError, TokenMismatch, where
from berth._frames import FrameIO
from berth._plan import Plan, cpu, step
from berth._public import publish
from berth._sealer import Sealer
from berth._token import Token
from berth.backends import Backend, Data

__all__ = ["MAX_SEQ", "AuditReport", "Snapshot", "Witness"]

log = logging.getLogger("berth")

PARKED = "parked"
LEFT = ("claimed", "expired", "drifted", "swept", "deleted")
_RECORD_MAGIC = b"\x89BWITNS\n"
_HEAD = b'{"witness":1}'
_TRIES = 200
_AFTER_TRIES = 3  # a record write after a commit point: tried this often before it is left for audit() to settle
_NOTES = ":unsettled/"  # beside the frames (`{identity}:unsettled/{key}`): a record write failed after a commit
_HEAD_READ = 1024  # the first read of a frame's head (as listing's); a longer header costs a second
_HEAD_MAX = PREFIX_SIZE + MAX_HEADER
MAX_SEQ = 2**63 - 1
"""Sequence numbers stay below it (the longest a header's `seq` can be, for the size check before I/O)."""

OK, PENDING, GONE = "ok", "pending", "gone"
MISSING, REPLAYED, UNKNOWN = "missing", "replayed", "unknown"
_GOOD = (OK, PENDING, GONE)


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What `store.audit()` found, comparing every frame with its witness record.

    `missing`: keys the witness saw parked whose frame is gone without a claim, sweep or
    delete. `replayed`: keys holding an older frame than the latest the witness saw (or a
    frame that already left). `unknown`: keys holding a frame the witness never saw.
    `tampered`: keys whose witness record does not open (edited, truncated, moved).
    A store rolled back to an older copy shows up in all of them. `unsettled`: keys whose
    record a witness failure after a commit point left behind, settled by this audit.
    """

    missing: tuple[str, ...] = ()
    replayed: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    tampered: tuple[str, ...] = ()
    checked: int = 0
    """How many keys (frames or witness records) were compared."""
    unsettled: tuple[str, ...] = ()
    """Keys where a witness write failed after a commit point (the run was parked or handed out all
    the same); this audit settled their records. Not an attack: `ok` does not count them."""

    @property
    def ok(self) -> bool:
        """True when every frame is the latest its witness saw and none is missing."""
        return not (self.missing or self.replayed or self.unknown or self.tampered)


class Record(msgspec.Struct, frozen=True, omit_defaults=True):
    """One key's witness record (see the module docstring)."""

    key: str
    seq: int = 0
    digest: str = ""
    token: int | str | None = None
    state: str = "none"
    pending: tuple[tuple[int, str], ...] = ()
    leave: tuple[int, str] | None = None
    top: int = 0


_record_decoder = msgspec.json.Decoder(Record)
_encoder = msgspec.json.Encoder()


class FrameInfo(NamedTuple):
    """What the witness compares of a frame: its header's seq (None if absent), digest and token.

    `digest` is None when only the frame's head was read (a save or a leave deciding what to
    write; see `Witness.head`): the header's `seq` then stands for the frame.
    """

    seq: int | None
    digest: str | None
    token: Token


class Snapshot(NamedTuple):
    """A consistent read of one key: the frame, its record, the record's witness token, the verdict."""

    found: tuple[Data, Token] | None
    info: FrameInfo | None
    record: Record | None
    wtoken: Token | None
    verdict: str


def judge(rec: Record | None, info: FrameInfo | None) -> str:
    """The verdict on a frame (or its absence) given the key's witness record."""
    if info is None:
        if rec is None or rec.state != PARKED:
            return GONE
        if rec.leave is not None and rec.leave[0] == rec.seq:
            return GONE  # a claim, sweep or delete of it began: it left
        return MISSING
    if rec is None or info.seq is None:
        return UNKNOWN
    if info.seq == rec.seq and info.digest in (None, rec.digest):
        if rec.state == PARKED and (rec.token is None or rec.token == info.token.value):
            return OK
        return REPLAYED  # it left, or it was put back (another generation)
    if info.seq > rec.seq and _candidate(rec, info) is not None:
        return PENDING
    if info.seq < rec.seq:
        return REPLAYED
    return UNKNOWN


def lost(snap: Snapshot) -> Record | None:
    """The record of a frame the witness saw parked, that never left and is not in place; else None."""
    rec = snap.record
    if snap.verdict in _GOOD or rec is None or rec.state != PARKED:
        return None
    if rec.leave is not None and rec.leave[0] == rec.seq:
        return None  # a claim, sweep or delete of it began: it left
    return rec


def _candidate(rec: Record, info: FrameInfo) -> str | None:
    """The digest of the pending candidate `info` is (by seq, and by digest when it was read), or None."""
    for seq, digest in rec.pending:
        if seq == info.seq and info.digest in (None, digest):
            return digest
    return None


def _digest(rec: Record, info: FrameInfo) -> str:
    """The digest to commit for the frame `info` (judged OK or PENDING against `rec`)."""
    if info.digest is not None:
        return info.digest
    return rec.digest if info.seq == rec.seq else _candidate(rec, info) or ""


def settle(rec: Record, snap: Snapshot) -> Record:
    """`rec` with what the snapshot proves: a pending frame in place landed; a frame gone with an intent left."""
    info = snap.info
    if snap.verdict == PENDING and info is not None and info.seq is not None:
        return _committed(rec, info.seq, _digest(rec, info), info.token.value)
    if snap.verdict == GONE and info is None and rec.state == PARKED and rec.leave is not None:
        return msgspec.structs.replace(rec, state=rec.leave[1], leave=None)
    return rec


def _committed(rec: Record, seq: int, digest: str, token: int | str) -> Record:
    return msgspec.structs.replace(
        rec,
        seq=seq,
        digest=digest,
        token=token,
        state=PARKED,
        leave=None,
        pending=tuple(p for p in rec.pending if p[0] > seq),
        top=max(rec.top, seq),
    )


def frame_info(
    found: tuple[Data, Token] | None, identity: str, key: str, named: Record | None = None, *, whole: bool = True
) -> FrameInfo | None:
    """The seq, digest and token of what the store holds under `key` (seq None if the header has none).

    `whole=False`: `found` holds only the frame's head; the digest is left None, as it is when `named` (a
    load's record) names this frame landed at this generation (`_head_snapshot`; the load's seal checks every byte).
    """
    if found is None:
        return None
    data, token = found
    try:
        seq = peek_header(data, identity, key)[0].seq
    except (FormatError, IntegrityError, TypeError, ValueError):
        seq = None
    whole = whole and (named is None or (named.state, named.seq, named.token) != (PARKED, seq, token.value))
    return FrameInfo(seq, hashlib.sha256(data).hexdigest() if whole else None, token)


def _size(found: tuple[Data, Token] | None) -> int:
    return 0 if found is None else len(found[0])


def _sealed(build: Callable[[int], bytes], seq: int) -> tuple[bytes, str]:
    """The frame `build` seals for `seq`, and its digest (one piece of work, off the loop when large)."""
    frame = build(seq)
    return frame, hashlib.sha256(frame).hexdigest()


def _token_of(found: tuple[Data, Token] | None) -> Token | None:
    return None if found is None else found[1]


class Witness:
    """The witness of one store: its backend, and the plans that read and write its records."""

    def __init__(self, backend: Backend, *, identity: str, sealer: Sealer):
        self.backend = backend
        self.identity = identity
        self._sealer = sealer
        self._prefix = identity + ":witness/"

    def __repr__(self) -> str:
        return f"Witness({self.backend!r})"

    def name(self, key: str) -> str:
        """The witness backend's name for `key`'s record."""
        return self._prefix + key

    def _aad(self, key: str) -> bytes:
        head = b"".join((MAGIC, bytes([FORMAT_VERSION]), len(_HEAD).to_bytes(4, "big"), _HEAD))
        return build_aad(head, self.identity, key)

    # --- records ----------------------------------------------------------------------------

    def seal(self, rec: Record) -> bytes:
        """A record's stored bytes: a magic, then the record sealed and bound to identity and key."""
        return _RECORD_MAGIC + self._sealer.seal(_encoder.encode(rec), aad=self._aad(rec.key))

    def record(self, key: str, found: tuple[Data, Token] | None) -> tuple[Record | None, Token | None]:
        """The record stored under `key` (opened and checked) and its witness token, or (None, None).

        Raises `IntegrityError` when it does not open: edited, truncated, moved, forged.
        """
        if found is None:
            return None, None
        data, token = found
        try:
            if not isinstance(data, (bytes, bytearray, memoryview)) or bytes(data[:8]) != _RECORD_MAGIC:
                raise IntegrityError("not a witness record")
            rec = _record_decoder.decode(self._sealer.open(bytes(data[8:]), aad=self._aad(key)))
            if rec.key != key or rec.state not in (PARKED, "none", *LEFT):
                raise IntegrityError("a record of another key")
        except BerthError as exc:
            if not isinstance(exc, IntegrityError | FormatError):
                raise
            why = "does not open"
        except Exception as exc:  # a decode error or a sealer's own failure: fail closed
            why = f"does not open ({type(exc).__name__})"
        else:
            return rec, token
        raise IntegrityError(
            f"witness record for {where(self.identity, key)} {why}: edited, truncated or moved",
            identity=self.identity,
            key=key,
        )

    # --- reading one key consistently ---------------------------------------------------------

    def snapshot(self, name: str, key: str, *, whole: bool = True, opening: bool = False) -> Plan[Snapshot]:
        """Read the frame, then the record, and judge; a bad verdict stands only if the frame did not
        change meanwhile (a save or claim racing the read is never taken for an attack).

        `whole=False` reads only the frame's head (`head`), and keeps that read only when the
        record names this very frame as landed (same seq, same generation, parked); anything
        else is read and judged again whole. `opening` (a load, which opens the frame): no digest
        of a frame the record names at its generation (`frame_info`).
        """
        if not whole:
            snap = yield from self._head_snapshot(name, key)
            if snap is not None:
                return snap
        for _ in range(_TRIES):
            found = yield from step(FrameIO.frame_get, name)
            rec, wtoken = self.record(key, (yield from step(FrameIO.record_get, self.name(key))))
            info = yield from cpu(_size(found), frame_info, found, self.identity, key, rec if opening else None)
            verdict = judge(rec, info)
            if verdict in _GOOD:
                return Snapshot(found, info, rec, wtoken, verdict)
            again = yield from step(FrameIO.frame_head, name, 1)  # only its token: the frame is read whole once
            if _token_of(again) == _token_of(found):
                return Snapshot(found, info, rec, wtoken, verdict)
        raise BackendError(f"the witness of {where(self.identity, key)} kept changing under the read: try again")

    def _head_snapshot(self, name: str, key: str) -> Plan[Snapshot | None]:
        """A snapshot from the frame's head alone, or None when the head is not enough.

        The head stands for the frame when the record names its `seq` as landed at the very
        generation in place: each `seq` is handed out once and any write gives another
        generation (docs/store.md, "Why four writes, and why a head is enough"). Anything else
        is read and judged again whole.
        """
        found = yield from self.head(name)
        rec, wtoken = self.record(key, (yield from step(FrameIO.record_get, self.name(key))))
        info = frame_info(found, self.identity, key, whole=False)
        if info is None:  # nothing in place: the head read is the whole read
            verdict = judge(rec, None)
            return Snapshot(None, None, rec, wtoken, verdict) if verdict in _GOOD else None
        if rec is None or rec.token is None or rec.token != info.token.value:
            return None
        if judge(rec, info) != OK:
            return None
        return Snapshot(found, info, rec, wtoken, OK)

    def head(self, name: str) -> Plan[tuple[Data, Token] | None]:
        """The frame's first bytes, up to the end of its header, and its token (a second ranged read
        only for a header longer than the first)."""
        found = yield from step(FrameIO.frame_head, name, _HEAD_READ)
        if found is not None and (need := header_size(found[0])) is not None and len(found[0]) < need <= _HEAD_MAX:
            found = yield from step(FrameIO.frame_head, name, need)
        return found

    def refuse(self, key: str, snap: Snapshot) -> None:
        """Raise `IntegrityError` for a snapshot whose frame is not the latest, or is missing."""
        verdict, rec, info = snap.verdict, snap.record, snap.info
        if verdict in _GOOD:
            return
        if verdict == MISSING:
            assert rec is not None
            why = (
                f"is missing: the witness saw frame {rec.seq} parked and no claim, sweep or delete of it "
                "(deleted without a claim, or the store was rolled back)"
            )
        elif verdict == REPLAYED:
            assert rec is not None and info is not None
            seen = f"frame {rec.seq} {rec.state}"
            why = (
                f"holds frame {info.seq}, not the latest: the witness saw {seen} "
                "(an older frame put back, or the store was rolled back)"
            )
        else:
            named = "no sequence number" if info is None or info.seq is None else f"sequence number {info.seq}"
            seen = "no record of the key" if rec is None else f"frame {rec.seq} {rec.state}"
            why = f"holds a frame the witness never saw ({named}; the witness has {seen})"
        raise IntegrityError(f"frame at {where(self.identity, key)} {why}", identity=self.identity, key=key)

    # --- plans ------------------------------------------------------------------------------

    def load(self, store: StoreCore, key: str, allow_expired: bool) -> Plan[Parked | None]:
        """`Store.load` with the witness: the frame opens, then must be the latest the witness saw."""
        return (yield from self.load_seen(store, key, allow_expired))[0]

    def load_seen(self, store: StoreCore, key: str, allow_expired: bool) -> Plan[tuple[Parked | None, Snapshot]]:
        """`load`, and the snapshot it judged (a claim hands it to `leave`)."""
        snap = yield from self.snapshot(store.name(key), key, opening=True)
        # a changed frame is refused as such first
        parked = yield from cpu(_size(snap.found), store.opened, key, snap.found, True)
        self.refuse(key, snap)
        if parked is not None and not allow_expired:
            store.check_deadline(key, parked)
        return parked, snap

    def save(
        self,
        store: StoreCore,
        key: str,
        build: Callable[[int], bytes],
        if_absent: bool,
        if_match: Token | None,
        *,
        strict: bool = False,
        size: int = 0,
        adopting: bool = False,
    ) -> Plan[Token]:
        """`Store.save` with the witness: record the candidate, write the frame, record that it landed.

        `strict` (reseal) refuses to write over a frame the witness does not stand behind. `size`:
        the bytes `build` seals (a large frame is sealed and hashed off an async caller's loop).
        `adopting` (`Store.adopt`): write only over a frame with no sequence number whose key the
        witness has no record of, judged in the same read as the write's condition; anything else
        is a `TokenMismatch` (the caller skips the key).
        """
        name = store.name(key)
        for attempt in range(_TRIES):
            snap = None
            if attempt == 0 and not strict and not adopting:
                snap = yield from self._expected(key, if_absent, if_match)
            if snap is None:
                snap = yield from self.snapshot(name, key, whole=strict)
            current = _token_of(snap.found)
            if (if_absent and current is not None) or (if_match is not None and current != if_match):
                raise TokenMismatch(
                    f"save lost at {where(self.identity, key)}: the token no longer matches what is parked",
                    identity=self.identity,
                    key=key,
                )
            if strict:
                self.refuse(key, snap)
            if adopting and (snap.record is not None or snap.info is None or snap.info.seq is not None):
                raise TokenMismatch(
                    f"adopt skipped {where(self.identity, key)}: the witness has a record of it, or its frame "
                    "has a sequence number",
                    identity=self.identity,
                    key=key,
                )
            self._refuse_over_missing(key, snap)
            if snap.verdict not in _GOOD and not adopting:
                log.warning("berth: saving over %s although %s", where(self.identity, key), snap.verdict)
            rec = settle(snap.record or Record(key), snap)
            seq = max(rec.top, rec.seq, *(p[0] for p in rec.pending)) + 1
            frame, digest = yield from cpu(size, _sealed, build, seq)
            rec = msgspec.structs.replace(rec, pending=(*rec.pending, (seq, digest)), top=seq)
            try:
                wtoken = yield from self._put(rec, snap.wtoken)
            except TokenMismatch:
                continue  # another writer of this key: read again
            try:
                token = yield from step(FrameIO.frame_put, name, frame, if_match=current, if_absent=current is None)
            except TokenMismatch:
                if if_absent or if_match is not None:
                    raise  # (an expected frame stood for the caller's own condition: it failed all the same)
                continue  # another save landed first, or the frame is not what the record says: read again
            # the commit point: the frame landed. Nothing after it fails the save.
            landed = functools.partial(_landed, seq=seq, digest=digest, token=token)
            yield from self._after_commit(key, rec, wtoken, landed, "save")
            return token
        raise BackendError(f"save at {where(self.identity, key)} kept losing to other writers of the key")

    def _expected(self, key: str, if_absent: bool, if_match: Token | None) -> Plan[Snapshot | None]:
        """A save's first read: the record alone, standing for the frame it names, or None (read both).

        A settled record (no candidate, no leave) names the frame in place at its generation, or
        nothing; step 3's write is conditional on exactly that, so it checks what a head read
        would have, and fails over anything else, which is then read and judged as before. None
        when not settled, or when the caller's own condition is not the one the record implies.
        """
        rec, wtoken = self.record(key, (yield from step(FrameIO.record_get, self.name(key))))
        if rec is not None and (rec.pending or rec.leave is not None):
            return None
        if rec is not None and rec.state == PARKED:
            if rec.token is None or if_absent or (if_match is not None and if_match.value != rec.token):
                return None
            found: tuple[Data, Token] = (b"", Token(rec.token))
            return Snapshot(found, FrameInfo(rec.seq, rec.digest, found[1]), rec, wtoken, OK)
        if if_match is not None:
            return None  # nothing should be there: the full read says whether something is, at that token
        return Snapshot(None, None, rec, wtoken, GONE)

    def leave(
        self, store: StoreCore, key: str, token: Token, how: str, seen: Snapshot | None = None, *, whole: bool = True
    ) -> Plan[None]:
        """`Store.delete` (and a claim's or sweep's delete) with the witness: intent, delete, record how it left.

        `seen`: the snapshot the caller's load just took (a claim), used for the first try instead of
        reading both again (the intent is a compare-and-swap and the delete conditional: a stale one costs
        a retry). `whole=False` (a delete by a token the caller holds) reads the frame's head when the record
        names it as landed (`snapshot`); a sweep or a prefix delete reads and checks every frame whole.
        """
        name = store.delete_name(key, token)
        for _ in range(_TRIES):
            if seen is not None and seen.found is not None and seen.found[1] == token:
                snap, seen = seen, None
            else:
                snap = yield from self.snapshot(name, key, whole=whole)
            if snap.found is None or snap.found[1] != token:
                raise TokenMismatch(
                    f"{how} lost at {where(self.identity, key)}: the token no longer matches what is parked",
                    identity=self.identity,
                    key=key,
                )
            info = snap.info
            if snap.verdict not in (OK, PENDING) or info is None or info.seq is None:
                # Not a frame the witness stands behind: remove it, leave the record as it is.
                yield from step(FrameIO.frame_delete, name, token)
                return None
            seq = info.seq
            rec = snap.record or Record(key)
            rec = _committed(rec, seq, _digest(rec, info), token.value)
            rec = msgspec.structs.replace(rec, leave=(seq, how))
            wtoken = snap.wtoken
            if rec != snap.record:
                try:
                    wtoken = yield from self._put(rec, snap.wtoken)
                except TokenMismatch:
                    continue
            yield from step(FrameIO.frame_delete, name, token)  # the commit point: nothing after it fails the call
            assert wtoken is not None  # the record was written, or was already this one
            yield from self._after_commit(key, rec, wtoken, functools.partial(_gone, seq=seq, how=how), how)
            return None
        raise BackendError(f"{how} at {where(self.identity, key)} kept losing to other writers of the key")

    def _refuse_over_missing(self, key: str, snap: Snapshot) -> None:
        """Refuse a save over a key whose record says a frame is parked, never left, and is not in place.

        Saving would make the witness forget the run it saw parked (a first-writer-wins slot
        reopened without a trace): the key stays refused, and reported, until an operator
        restores the frame or calls `Store.acknowledge(key)`.
        """
        rec = lost(snap)
        if rec is None:
            return
        info = snap.info
        in_place = "nothing" if info is None else f"frame {info.seq}"
        if info is not None and info.seq is None:
            in_place = "a frame with no sequence number"
        raise IntegrityError(
            f"save at {where(self.identity, key)} refused: the witness saw frame {rec.seq} parked there and "
            f"no claim, sweep or delete of it, and the store holds {in_place} ({snap.verdict}); restore the "
            "frame, or accept that it is gone with store.acknowledge(key) (berth audit --acknowledge KEY)",
            identity=self.identity,
            key=key,
        )

    def keys_after(self, prefix: str, after: str) -> Iterator[str]:
        """Keys under `prefix` the witness holds a record for that sort after `after`, last first.

        Names only, no record read: a reader that served the frames it found in that range asks
        the store to `load` each key it did not find (a missing one is refused there).
        """
        base = self._prefix
        for name, *_ in self.backend.sorted_heads(base + prefix, 1, limit=None, reverse=True):
            key = name[len(base) :]
            if key <= after:
                return
            yield key

    def note_prefix(self) -> str:
        """Where, in the store's backend, notes of record writes that failed after a commit point live."""
        return self.identity + _NOTES

    def _after_commit(
        self, key: str, rec: Record, wtoken: Token, change: Callable[[Record], Record | None], what: str
    ) -> Plan[None]:
        """The record write after a commit point (a frame landed, or left): it never fails the call.

        Tried `_AFTER_TRIES` times. If the witness still fails, the record stays as the step
        before the commit left it -- a pending candidate, or a leave begun: both judged good, as
        after a kill at that point -- and a note under `{identity}:unsettled/{key}` in the store's
        own backend tells `audit()` to settle the record and report the key (`unsettled`). The
        caller who committed gets its outcome: the run is never lost, never handed out twice.
        """
        failure: Exception | None = None
        for _ in range(_AFTER_TRIES):
            try:
                yield from self._update(key, rec, wtoken, change)
                return None
            except Exception as exc:  # noqa: BLE001 - any failure of the witness: the commit stands
                failure = exc
        log.warning(
            "berth: the witness failed after the %s at %s committed (%s); left for audit() to settle",
            what,
            where(self.identity, key),
            failure,
        )
        try:
            yield from step(FrameIO.frame_put, self.note_prefix() + key, _encoder.encode({"after": what}))
        except Exception as exc:  # noqa: BLE001 - the commit stands; the record is still judged good
            log.error(
                "berth: cannot note the unsettled witness record of %s (%s); the next save of the key settles it",
                where(self.identity, key),
                exc,
            )
        return None

    def acknowledge(self, store: StoreCore, key: str) -> Plan[bool]:
        """`Store.acknowledge`: record that the frame the witness saw parked under `key`, and which is
        not in place, is gone for good (as deleted). False when there is nothing of the kind."""
        name = store.name(key)
        for _ in range(_TRIES):
            snap = yield from self.snapshot(name, key)
            rec = lost(snap)
            if rec is None:
                return False
            try:
                yield from self._put(msgspec.structs.replace(rec, state="deleted", leave=None), snap.wtoken)
            except TokenMismatch:
                continue  # another writer of the record: read again
            log.warning("berth: %s: frame %s acknowledged gone by an operator", where(self.identity, key), rec.seq)
            return True
        raise BackendError(f"acknowledge at {where(self.identity, key)} kept losing to other writers of the key")

    def _put(self, rec: Record, wtoken: Token | None) -> Plan[Token]:
        token = yield from step(
            FrameIO.record_put, self.name(rec.key), self.seal(rec), if_match=wtoken, if_absent=wtoken is None
        )
        return token

    def _update(self, key: str, rec: Record, wtoken: Token, change: Callable[[Record], Record | None]) -> Plan[None]:
        """Apply `change` to the record by compare-and-swap, re-reading it when another writer won."""
        for _ in range(_TRIES):
            new = change(rec)
            if new is None:
                return
            try:
                yield from self._put(new, wtoken)
                return
            except TokenMismatch:
                pass
            found_rec, found_token = self.record(key, (yield from step(FrameIO.record_get, self.name(key))))
            if found_rec is None or found_token is None:
                return  # the record was removed: nothing to settle (audit reports the frame)
            rec, wtoken = found_rec, found_token
        raise BackendError(f"the witness of {where(self.identity, key)} kept changing: its record is left to settle")

    # --- audit ---------------------------------------------------------------------------------

    def audit(self, store: StoreCore) -> Plan[AuditReport]:
        """Compare every frame with its record, and every record with its frame: `Store.audit`, as a plan."""
        bad: dict[str, list[str]] = {MISSING: [], REPLAYED: [], UNKNOWN: [], "tampered": []}
        seen: set[str] = set()
        checked = 0
        frames = store.prefix
        keys = [name[len(frames) :] for name in (yield from step(FrameIO.frame_names, frames))]
        for name in (yield from step(FrameIO.record_names, self._prefix)):
            key = name[len(self._prefix) :]
            # those with a frame are compared with the frames: a head says so without reading the frame again
            if (yield from step(FrameIO.frame_head, frames + key, 1)) is None:
                keys.append(key)
        for key in keys:
            if key in seen:
                continue
            checked += 1
            try:
                snap = yield from self.snapshot(frames + key, key)
            except IntegrityError:
                bad["tampered"].append(key)
                seen.add(key)
                continue
            if snap.verdict not in _GOOD:
                bad[snap.verdict].append(key)
                seen.add(key)
        unsettled = []
        notes = self.note_prefix()
        for name in (yield from step(FrameIO.frame_names, notes)):
            unsettled.append(name[len(notes) :])
            try:
                yield from self._settle(store, name[len(notes) :])
            except BerthError as exc:  # a writer of the key raced the audit, or a bad record: noted still
                log.warning("berth: audit left %s unsettled: %s", where(self.identity, name[len(notes) :]), exc)
        return AuditReport(
            missing=tuple(sorted(bad[MISSING])),
            replayed=tuple(sorted(bad[REPLAYED])),
            unknown=tuple(sorted(bad[UNKNOWN])),
            tampered=tuple(sorted(bad["tampered"])),
            checked=checked,
            unsettled=tuple(sorted(unsettled)),
        )

    def _settle(self, store: StoreCore, key: str) -> Plan[None]:
        """Write down what the frame in place proves of a noted key's record, then drop the note."""
        snap = yield from self.snapshot(store.name(key), key)
        if snap.record is not None and snap.wtoken is not None:
            rec = settle(snap.record, snap)
            if rec != snap.record:
                yield from self._put(rec, snap.wtoken)
        note = self.note_prefix() + key
        found = yield from step(FrameIO.frame_get, note)
        if found is not None:
            yield from step(FrameIO.frame_delete, note, found[1])


def _landed(rec: Record, seq: int, digest: str, token: Token) -> Record | None:
    if rec.seq >= seq:
        return None  # settled already (a claimer promoted it), or superseded
    return _committed(rec, seq, digest, token.value)


def _gone(rec: Record, seq: int, how: str) -> Record | None:
    if rec.seq != seq or rec.state != PARKED:
        return None
    return msgspec.structs.replace(rec, state=how, leave=None)


publish(globals())  # its public names read as berth.X
