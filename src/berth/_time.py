"""The one clock helper: "now" as an aware UTC datetime."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

__all__ = ["Clock", "utcnow"]

Clock = Callable[[], datetime]
"""Returns "now" as an aware datetime; stores, question stores and coordinators take one (tests inject it)."""


def utcnow() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(timezone.utc)
