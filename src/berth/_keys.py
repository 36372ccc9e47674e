"""Validation of keys and identities, done before any I/O."""

from __future__ import annotations

import re
import unicodedata

from berth._errors import InvalidKey

__all__ = ["MAX_KEY_BYTES", "validate_identity", "validate_key"]

MAX_KEY_BYTES = 1024
_IDENTITY = re.compile(r"[A-Za-z0-9._-]{1,128}")
# Fast path: printable ASCII without '.', which covers almost every real key.
_PLAIN_ASCII = re.compile(r"[ -\-/-~]*")


def validate_identity(identity: object) -> str:
    """Return `identity` if berth accepts it, else raise `InvalidKey`."""
    if not isinstance(identity, str) or not _IDENTITY.fullmatch(identity) or identity in (".", ".."):
        raise InvalidKey(
            f"invalid identity {identity!r}: use 1-128 of A-Z a-z 0-9 . _ - (not '.' or '..')",
            identity=identity if isinstance(identity, str) else None,
        )
    return identity


def validate_key(key: object, identity: str | None = None) -> str:
    """Return `key` if berth accepts it, else raise `InvalidKey` naming the rule it breaks."""
    if type(key) is not str:
        # A str subclass (a StrEnum member, say) could hash, compare and encode as it likes, and the
        # frame header and witness records encode exact str only: refused here, before any I/O.
        what = "a str, not a subclass of it: pass str(key)" if isinstance(key, str) else "a str"
        raise InvalidKey(f"invalid key {key!r} for identity {identity!r}: a key is {what}", identity=identity)
    problem = _key_problem(key)
    if problem:
        raise InvalidKey(f"invalid key {key!r} for identity {identity!r}: {problem}", identity=identity, key=key)
    return key


# Not cached: a store keeps each key's checked name (`berth._core._NAMES_KEPT`), so its save, load
# and claim check a key here once per store; a cache here as well measured nothing on them (issue 33,
# benchmarks/bench_hotpath.py); the coordinator checks through its store's. Other callers (the question
# store) pay ~1 µs a check.
def _key_problem(key: str) -> str | None:
    if not key:
        return "a key is 1-1024 bytes of UTF-8, this one is empty"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "a key must be valid UTF-8 (no lone surrogates)"
    if size > MAX_KEY_BYTES:
        return f"a key is at most {MAX_KEY_BYTES} bytes of UTF-8, this one is {size}"
    if key.startswith("/"):
        return "a key cannot start with '/'"
    if not (key.isascii() and _PLAIN_ASCII.fullmatch(key)):
        for ch in key:
            if unicodedata.category(ch) == "Cc":
                return f"a key cannot contain control characters (found {ch!r})"
    for segment in key.split("/"):
        if segment == "":
            return "a key cannot have an empty segment ('//' or a trailing '/')"
        if segment in (".", ".."):
            return f"a key cannot have a {segment!r} segment"
    return None
