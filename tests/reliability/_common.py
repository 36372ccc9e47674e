"""Shared pieces of the reliability suite: results, sealers, envelopes and store openers.

Every scenario is a plain function returning a `Result`, so the same code runs
as a short pytest test (CI), as a `slow` test, and from scripts/reliability.py.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import berth
from berth.testing import SECRET, make_envelope

__all__ = [
    "MARKER",
    "Result",
    "Timer",
    "big_envelope",
    "bounded",
    "kms_available",
    "leaked_in_text",
    "make_sealer",
    "scan_tree",
    "sealer_names",
    "still_running",
]

MARKER = SECRET
"""Planted in the state of every envelope the suite parks; must never leak."""


@dataclass
class Result:
    """One row of the reliability table: a scenario on a backend, its trials and failures."""

    scenario: str
    backend: str
    trials: int = 0
    failures: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    """What the trial did (faults landed, kills mid-call...), so a test can check that it bit."""

    def fail(self, note: str) -> None:
        """Count one failure and keep the first few descriptions."""
        self.failures += 1
        if len(self.notes) < 20:
            self.notes.append(note)

    def check(self) -> None:
        """Raise AssertionError (with the first failures) if any trial failed."""
        assert self.trials > 0, f"{self.scenario} on {self.backend} ran no trials"
        assert self.failures == 0, f"{self.scenario} on {self.backend}: {self.failures} failures: " + "; ".join(
            self.notes
        )


class Timer:
    """Bounds a scenario's wall time: `while timer.left(): ...`."""

    def __init__(self, seconds: float):
        self.start = time.monotonic()
        self.stop = self.start + seconds

    def left(self) -> bool:
        """True while the budget is not spent."""
        return time.monotonic() < self.stop

    def elapsed(self) -> float:
        """Seconds since the timer started."""
        return time.monotonic() - self.start


def kms_available() -> bool:
    """Whether berth.KmsSealer and berth.kms.LocalKms exist yet."""
    try:
        import berth.kms as kms
    except ImportError:
        return False
    return hasattr(berth, "KmsSealer") and hasattr(kms, "LocalKms")


def sealer_names() -> list[str]:
    """The sealers the suite runs under: plaintext, aes-gcm and (when present) kms-local."""
    names = ["plaintext", "aes-gcm"]
    if kms_available():
        names.append("kms-local")
    return names


def make_sealer(name: str, keyring: berth.Keyring | None = None) -> Any:
    """A fresh sealer by name (a fresh keyring unless one is given)."""
    if name == "plaintext":
        return berth.PlaintextSealer()
    keyring = keyring or berth.Keyring.generate()
    if name == "aes-gcm":
        return berth.AesGcmSealer(keyring)
    if name == "kms-local":
        import berth.kms as kms

        return berth.KmsSealer(kms.LocalKms(keyring))
    raise ValueError(f"unknown sealer {name!r}")


def big_envelope(run_id: str = "run-1", size: int = 3000, **changes: Any) -> berth.Envelope:
    """A fully populated envelope of about `size` bytes whose state, loop state and call input hold MARKER."""
    filler = ("lorem ipsum " * (size // 12 + 1))[:size]
    fields: dict[str, Any] = dict(
        provider_state={"messages": [{"role": "user", "content": f"customer text {MARKER} {filler}"}]},
        loop_state={"note": f"loop {MARKER}"},
        pending_calls=[berth.PendingCall("call-1", "ask_human", {"question": f"Ship it? {MARKER}"})],
    )
    fields.update(changes)
    return make_envelope(run_id, **fields)


def bounded(n: int, timer: Timer) -> Callable[[], bool]:
    """A loop guard: at most `n` iterations and never past `timer`."""
    count = [0]

    def go() -> bool:
        count[0] += 1
        return count[0] <= n and timer.left()

    return go


def scan_tree(root: str | os.PathLike[str], result: Result, *, modes: bool = True) -> int:
    """Check every file under `root` for MARKER (and, with `modes`, 0600 files / 0700 dirs).

    Returns how many files and directories were checked; each leak or wrong mode is a failure.
    """
    marker = MARKER.encode()
    checked = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        checked += 1
        mode = stat.S_IMODE(os.lstat(dirpath).st_mode)
        if modes and mode != 0o700:
            result.fail(f"directory {dirpath} has mode {oct(mode)}, not 0o700")
        for name in filenames:
            path = os.path.join(dirpath, name)
            checked += 1
            st = os.lstat(path)
            if modes and stat.S_IMODE(st.st_mode) != 0o600:
                result.fail(f"file {path} has mode {oct(stat.S_IMODE(st.st_mode))}, not 0o600")
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:  # a WAL or temp file removed while we walked
                continue
            if marker in data:
                result.fail(f"plaintext marker found in {path}")
    return checked


def leaked_in_text(text: str) -> bool:
    """Whether `text` (an error message or log line) holds the plaintext marker."""
    return MARKER in text


def still_running(workers: Iterable[Any], seconds: float) -> list[str]:
    """Join each thread or process within `seconds` in all; the names of those still running after it.

    A worker still running after its join is a failure of the trial, never ignored: what it does
    next (a claim, a resume) is not counted, and it may still be holding or changing a run.
    """
    stop = time.monotonic() + seconds
    for worker in workers:
        worker.join(max(0.0, stop - time.monotonic()))
    return [str(getattr(worker, "name", worker)) for worker in workers if worker.is_alive()]
