"""The compare-and-swap token a load mints and a delete presents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from berth._public import publish

__all__ = ["Token"]


@dataclass(frozen=True, slots=True)
class Token:
    """An opaque compare-and-swap handle: a backend generation or ETag."""

    value: int | str

    ZERO: ClassVar[Token]

    def __bool__(self) -> bool:
        return not self.is_zero

    @property
    def is_zero(self) -> bool:
        """True for `Token.ZERO`, which never matches anything parked."""
        return self.value == 0 or self.value == ""

    def __repr__(self) -> str:
        return f"Token({self.value!r})"


Token.ZERO = Token(0)


publish(globals())  # its public names read as berth.X
