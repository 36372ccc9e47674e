"""What the contract's cases park and try: the envelope, good and bad keys, an injectable clock, raw frames."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

from berth._envelope import Envelope, PendingCall
from berth._store import Store

__all__ = [
    "BAD_IDENTITIES",
    "BAD_KEYS",
    "GOOD_KEYS",
    "SECRET",
    "FakeClock",
    "assert_clean",
    "make_envelope",
    "plant_frame",
    "raw_frame",
]

SECRET = "PLAINTEXT-MARKER-7f3a9c"
"""Planted in every contract envelope's state: it must never appear in an error message."""

BAD_KEYS = [
    "",
    "/leading",
    "a//b",
    "trailing/",
    ".",
    "..",
    "a/./b",
    "a/../b",
    "../escape",
    "nul\x00byte",
    "new\nline",
    "tab\tkey",
    "del\x7f",
    "c1\x85control",
    "x" * 1025,
    "é" * 513,
]
GOOD_KEYS = ["org/repo#42", "a", "a/b", "with space", "ünïcødé/ключ", "x" * 1024, "a.b/..c/d..", "é" * 512]
BAD_IDENTITIES = ["", ".", "..", "a/b", "a b", "x" * 129, "tab\t", "ünï"]


class FakeClock:
    """An injectable clock: `store = Store(..., clock=clock)`; move it with `advance`."""

    def __init__(self, start: datetime | None = None):
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self.now += delta
            return self.now


def make_envelope(run_id: str = "run-1", **changes: Any) -> Envelope:
    """A small, fully populated envelope whose state holds the `SECRET` marker."""
    fields: dict[str, Any] = dict(
        provider="anthropic",
        model="claude-test",
        config_digest="sha256:" + "0" * 64,
        run_id=run_id,
        provider_state={"messages": [{"role": "user", "content": f"customer text {SECRET}"}]},
        loop_state={"step": 3},
        pending_calls=[PendingCall("call-1", "ask_human", {"question": "Ship it?"})],
        turn=3,
        remaining_turns=7,
        reason="awaiting answer",
        trace_id="trace-abc",
        labels={"repo": "org/repo", "pr": "42"},
    )
    fields.update(changes)
    return Envelope(**fields)


def raw_frame(store: Store, key: str) -> bytes:
    """The frame parked at `key`, read from the store's backend (past the store)."""
    found = store.backend.get(f"{store.identity}/{key}")
    assert found is not None, f"nothing stored for {key!r}"
    return bytes(found[0])


def plant_frame(store: Store, key: str, data: bytes) -> None:
    """Write `data` at `key` through the store's backend (past the store): a tampered, moved or foreign frame."""
    store.backend.put(f"{store.identity}/{key}", data)


def assert_clean(exc: BaseException, key: str) -> None:
    """`exc`'s message names `key` and holds no plaintext state (the `SECRET` marker)."""
    text = str(exc)
    assert SECRET not in text, "an error message leaked plaintext state"
    assert key in text or repr(key) in text, f"error message does not name the key: {text}"
