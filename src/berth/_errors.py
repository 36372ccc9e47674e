"""berth's exceptions.

    BerthError
    ├── TokenMismatch      the token no longer names the parked envelope (lost claim)
    │   └── AnswerRefused  (berth._question_types) an answer to a question that is not the pending one
    ├── Expired            the envelope is past its deadline; never resumed
    ├── IntegrityError     a frame cannot be opened as what it claims to be
    ├── FormatError        not a frame, or a frame of a newer format
    ├── ConfigDrift        the envelope was parked under another version/provider/model/config
    ├── InvalidKey         (also ValueError) a key or identity berth refuses
    ├── InvalidAnswer      (berth._question_types; also ValueError) an answer its question does not accept
    ├── InvalidEnvelope    (also ValueError) an envelope berth refuses to park
    ├── EnvelopeTooLarge   the encoded envelope exceeds the store's limit
    └── BackendError       the storage failed; the outcome of a write may be unknown

Every message names the identity and key involved and never contains state.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING

from berth._public import publish

if TYPE_CHECKING:
    from berth._token import Token

__all__ = [
    "BackendError",
    "BerthError",
    "ConfigDrift",
    "EnvelopeTooLarge",
    "Expired",
    "FormatError",
    "IntegrityError",
    "InvalidEnvelope",
    "InvalidKey",
    "StoreMissing",
    "TokenMismatch",
    "caller_level",
    "restated",
    "where",
]


def where(identity: str | None, key: str | None = None) -> str:
    """Render the identity/key pair every message names (the key left out where there is none, as for a
    whole store's listing); the library's errors and the CLI's messages both use it."""
    return f"identity {identity or '?'!r}" + ("" if key is None else f", key {key!r}")


def restated(exc: BerthError, message: str, *, identity: str | None, key: str | None) -> BerthError:
    """A new error of `exc`'s class saying `message` about `identity` and `key`; `exc` itself is left as it was.

    The class's other attributes (an `Expired`'s deadline and token, say) are carried over.
    Made without calling the class's own `__init__`, which may take other arguments; the
    caller raises it `from exc`.
    """
    cls = type(exc)
    err = cls.__new__(cls)
    BerthError.__init__(err, message, identity=identity, key=key)
    for name, value in vars(exc).items():
        if name not in ("identity", "key"):
            setattr(err, name, value)
    return err


class BerthError(Exception):
    """Base of every error berth raises."""

    def __init__(self, message: str, *, identity: str | None = None, key: str | None = None):
        super().__init__(message)
        self.identity = identity
        self.key = key


class TokenMismatch(BerthError):
    """The token does not match the parked envelope's generation (or nothing is parked)."""


class Expired(BerthError):
    """The envelope is past its deadline; carries `key`, `deadline` and `token`."""

    def __init__(
        self,
        message: str,
        *,
        identity: str | None = None,
        key: str | None = None,
        deadline: datetime | None = None,
        token: Token | None = None,
    ):
        super().__init__(message, identity=identity, key=key)
        self.deadline = deadline
        self.token = token


class IntegrityError(BerthError):
    """The frame cannot be opened: tampered, moved, wrong key, or a refused downgrade."""


class FormatError(BerthError):
    """The bytes are not a berth frame, or a frame of a format this berth does not know."""


class ConfigDrift(BerthError):
    """The envelope was parked under another version, provider, model or config digest."""


class InvalidKey(BerthError, ValueError):
    """A key or identity that berth refuses; raised before any I/O."""


class InvalidEnvelope(BerthError, ValueError):
    """An envelope that berth refuses to park (or to resume); raised before any I/O."""


class EnvelopeTooLarge(BerthError):
    """The encoded envelope is larger than the store's `max_envelope_bytes`."""


class BackendError(BerthError):
    """The backend failed; a write that raised this may or may not have happened."""


class StoreMissing(BackendError):
    """Nothing is at the URL of a store opened with `create=False`: no directory, database file or table.

    A `BackendError` (what a host catches); the command line tells it apart as "not found".
    """


publish(globals())  # its public names read as berth.X


def caller_level() -> int:
    """The `stacklevel` that points a warning, warned by the caller of this, at the first caller outside berth."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "berth":
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
