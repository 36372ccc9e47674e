"""What the command line and the inbox both show: times, durations, sizes, labels, listings and envelopes as JSON.

Plain functions of their arguments: no click, no terminal, nothing of the CLI, so `berth serve`
loads without the command line's machinery.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import berth

__all__ = [
    "ago",
    "deadline_text",
    "envelope_doc",
    "is_expired",
    "labels_text",
    "listing_doc",
    "local",
    "now",
    "rfc3339",
    "size_text",
    "span",
]


def now() -> datetime:
    """The current time, aware."""
    return datetime.now(timezone.utc)


def rfc3339(dt: datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z`, for JSON; with its own offset when UTC cannot hold it.

    `9999-12-31T23:59-23:59` is a deadline berth accepts, and in UTC it falls in year 10000.
    """
    if dt is None:
        return None
    if dt.tzinfo is timezone.utc:  # as headers decode: no conversion to make
        return dt.isoformat().replace("+00:00", "Z")
    try:
        return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    except OverflowError:
        return dt.isoformat()


def local(dt: datetime) -> str:
    """Local time for people: `2026-11-30 08:12:03 CET` (in its own offset when local time cannot hold it)."""
    try:
        return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except OverflowError:
        return dt.isoformat(" ")


def span(seconds: float) -> str:
    """A duration in at most two units: `45s`, `12m`, `3h 5m`, `13d 23h`."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def ago(dt: datetime, at: datetime) -> str:
    """`5s ago` or `in 14d`, relative to `at`."""
    delta = (dt - at).total_seconds()
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def is_expired(deadline: datetime | None, at: datetime) -> bool:
    """Past its deadline (strictly), as the store decides."""
    return deadline is not None and at > deadline


def deadline_text(deadline: datetime | None, at: datetime) -> str:
    """`in 13d 23h`, `expired 5s ago`, or `none`."""
    if deadline is None:
        return "none"
    return f"expired {ago(deadline, at)}" if is_expired(deadline, at) else ago(deadline, at)


def size_text(n: int) -> str:
    """`812 B`, `1.2 KiB`, `3.4 MiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n:,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n:,} B"  # pragma: no cover


def labels_text(labels: Any, *, human: bool = False) -> str:
    """`k=v k2=v2`; for people, without berth's own bookkeeping labels (`berth.*`)."""
    return " ".join(f"{k}={v}" for k, v in labels.items() if not (human and k.startswith("berth.")))


def listing_doc(item: berth.Listing) -> dict[str, Any]:
    """A listing as JSON, with the Python API's field names."""
    return {
        "key": item.key,
        "run_id": item.run_id,
        "created_at": rfc3339(item.created_at),
        "deadline": rfc3339(item.deadline),
        "size": item.size,
        "labels": dict(item.labels),
        "sealed_by": item.sealed_by,
    }


def _raw(data: bytes | None) -> Any:
    if data is None:
        return None
    return json.loads(data)


def envelope_doc(key: str, env: berth.Envelope) -> dict[str, Any]:
    """An envelope as JSON, with the Python API's field names (raw JSON fields decoded)."""
    return {
        "key": key,
        "version": env.version,
        "provider": env.provider,
        "model": env.model,
        "config_digest": env.config_digest,
        "run_id": env.run_id,
        # binary state (a content type declared): its bytes as base64 text, beside the type
        "provider_state": (
            _raw(env.provider_state)
            if env.content_type is None
            else base64.b64encode(env.provider_state).decode("ascii")
        ),
        "content_type": env.content_type,
        "loop_state": _raw(env.loop_state),
        "pending_calls": [{"id": c.id, "name": c.name, "input": _raw(c.input)} for c in env.pending_calls],
        "turn": env.turn,
        "remaining_turns": env.remaining_turns,
        "reason": env.reason,
        "trace_id": env.trace_id,
        "deadline": rfc3339(env.deadline),
        "created_at": rfc3339(env.created_at),
        "labels": dict(env.labels),
    }
