"""`MultiSealer`: seal with one sealer, open with whichever sealer and key the frame names."""

from __future__ import annotations

from collections.abc import Sequence

from berth._codec import peek_header
from berth._errors import FormatError, IntegrityError
from berth._public import publish
from berth._sealer import PartsSealer, Sealer, as_parts, check_sealer

__all__ = ["MultiSealer"]


class MultiSealer:
    """Seals with `primary`; opens frames sealed by any member, routed by the sealer and key id they name.

    For rotation and migration: `MultiSealer(KmsSealer(new), AesGcmSealer(old))`
    opens both, seals only with the new one, and `store.reseal()` moves every
    frame not under the primary onto it. `name` and `key_id` are the primary's.

    Routing: a store passes the frame head as the start of the associated data,
    and the head names the sealer and key id (authenticated by the seal), so
    `open` hands the frame to the first member whose `can_open` accepts that pair.
    Associated data that is not a frame's is tried against each member in turn.
    """

    def __init__(self, primary: Sealer, *others: Sealer):
        members: list[Sealer] = []
        for sealer in (primary, *others):
            if isinstance(sealer, MultiSealer):
                members.extend(sealer.members)
                continue
            check_sealer(sealer, "MultiSealer member")
            members.append(sealer)
        self._members = tuple(members)
        self._parts: tuple[PartsSealer, ...] = tuple(as_parts(m) for m in members)  # each member's fast path
        self._primary = members[0]
        self.name: str = self._primary.name

    @property
    def members(self) -> tuple[Sealer, ...]:
        """Every member, the primary first."""
        return self._members

    @property
    def primary(self) -> Sealer:
        """The sealer new frames are sealed with."""
        return self._primary

    @property
    def key_id(self) -> str:
        """The primary's key id."""
        return self._primary.key_id

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        """Seal with the primary.

        Raises:
            BackendError: the primary's KMS, if it has one, is down or refuses.
        """
        return self._primary.seal(plaintext, aad=aad)

    def seal_parts(self, head: bytes, parts: Sequence[bytes], *, aad: bytes) -> bytes:
        """`seal` in parts, through the primary's fast path."""
        return self._parts[0].seal_parts(head, parts, aad=aad)

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        """Open with the member that holds the sealer and key id the frame names.

        Raises:
            IntegrityError: no member holds that key, or the frame does not open.
            BackendError: the member's KMS is down or refuses.
        """
        return self.open_parts(sealed, (), aad=aad)[0]

    def open_parts(self, sealed: bytes | memoryview, cuts: Sequence[int], *, aad: bytes) -> list[bytes]:
        """`open` in parts, through the fast path of the member the frame names."""
        named = _named_by(aad)
        if named is not None:
            return self._member_for(*named).open_parts(sealed, cuts, aad=aad)
        last: IntegrityError | None = None
        for member in self._parts:
            try:
                return member.open_parts(sealed, cuts, aad=aad)
            except IntegrityError as exc:
                last = exc
        raise IntegrityError(f"no member of this MultiSealer opens these bytes ({last})")

    def can_open(self, sealer: str, key_id: str) -> bool:
        """True if any member can open frames sealed by `sealer` under `key_id`."""
        return any(m.can_open(sealer, key_id) for m in self._members)

    def _member_for(self, sealer: str, key_id: str) -> PartsSealer:
        for member in self._parts:
            if member.can_open(sealer, key_id):
                return member
        raise IntegrityError(f"sealed by {sealer} key {key_id!r}, which no member of this MultiSealer holds")

    def __repr__(self) -> str:
        return f"MultiSealer({', '.join(repr(m) for m in self._members)})"

    def __reduce__(self) -> tuple[type[MultiSealer], tuple[Sealer, ...]]:
        return (MultiSealer, self._members)


def _named_by(aad: bytes | memoryview) -> tuple[str, str] | None:
    """The (sealer, key id) a store's associated data names in its frame head, else None."""
    try:
        header, _ = peek_header(aad, "?", "?")
    except (FormatError, IntegrityError):
        return None
    return header.sealer, header.key_id


publish(globals())  # its public names read as berth.X
