"""Leaks and permissions: a sealed run leaves its plaintext in no file, message or log line.

Every operation of the store (and each error path) runs on the file and SQLite
backends under umask 0, with MARKER planted in the state. Afterwards no file of
the store -- WAL and SHM included, scanned while the store is open and after it
closes -- holds the marker, every file is 0600 and every directory 0700, and
no error message or log record (berth's or anyone's) contains it.
"""

from __future__ import annotations

import logging
import os
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth

from ._common import MARKER, Result, big_envelope, leaked_in_text, scan_tree

BACKENDS = ["file", "sqlite"]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.lines.append(text)


def _messages(exc: BaseException) -> list[str]:
    out = []
    seen: BaseException | None = exc
    while seen is not None:
        out += [str(seen), repr(seen)]
        # what a traceback shows: the cause, or the context unless `raise ... from None` hid it
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    out.append("".join(traceback.format_exception(exc)))
    return out


def run_leaks(kind: str, root: Path, *, rounds: int = 1) -> Result:
    """Run every store operation and error path sealed under umask 0; count leaks and bad modes."""
    result = Result("leaks: marker in files/messages/logs; modes 0600/0700 under umask 0", kind)
    root.mkdir(parents=True, exist_ok=True)
    capture = _Capture()
    berth_log = logging.getLogger("berth")
    old_level = berth_log.level
    logging.getLogger().addHandler(capture)
    berth_log.setLevel(logging.DEBUG)
    old_umask = os.umask(0)
    messages: list[str] = []
    try:
        store_dir = root / "store"
        url = f"file://{store_dir}" if kind == "file" else f"sqlite:///{store_dir}/berth.db"
        keyring = berth.Keyring.generate()
        keyring.save(root / "store-keys.json")
        sealer = berth.AesGcmSealer(keyring)
        store = berth.open_store(url, identity="leak", sealer=sealer)
        past = datetime.now(timezone.utc) - timedelta(hours=1)
        future = datetime.now(timezone.utc) + timedelta(days=1)

        def expect(exc_type: type[BaseException], fn: Any, *args: Any, **kwargs: Any) -> None:
            try:
                fn(*args, **kwargs)
            except exc_type as exc:
                messages.extend(_messages(exc))
            else:
                result.fail(f"{getattr(fn, '__name__', fn)}{args!r} did not raise {exc_type}")

        for r in range(rounds):
            for i in range(24):
                deadline = past if i % 4 == 0 else future
                store.save(f"run/{r}/{i}", big_envelope(f"run-{r}-{i}", size=2000, deadline=deadline))
            for i in range(1, 24, 4):
                parked = store.load(f"run/{r}/{i}")
                assert parked is not None and MARKER.encode() in parked.envelope.provider_state
                store.save(f"run/{r}/{i}", big_envelope(f"run-{r}-{i}b", size=2000))  # re-save
                expect(berth.TokenMismatch, store.delete, f"run/{r}/{i}", parked.token)
            expect(berth.Expired, store.load, f"run/{r}/0")
            expect(berth.Expired, store.claim, f"run/{r}/4")
            for i in (2, 3, 5):
                assert store.claim(f"run/{r}/{i}") is not None
            list(store.list())
            store.sweep()
            # a rotated key: reseal everything, then the old store cannot open the new frames
            rotated = berth.AesGcmSealer(keyring.rotate())
            resealer = berth.open_store(url, identity="leak", sealer=rotated)
            resealer.reseal()
            expect(berth.IntegrityError, store.load, f"run/{r}/6")
            resealer.close()
            # tampering, plaintext downgrade, frames from another identity
            name = f"leak/run/{r}/7"
            found = store.backend.get(name)
            assert found is not None
            bad = bytearray(found[0])
            bad[-3] ^= 1
            store.backend.put(name, bytes(bad))
            expect(berth.IntegrityError, resealer.load, f"run/{r}/7")
            plain = berth.open_store(url, identity="leak", sealer=berth.PlaintextSealer())
            plain.save(f"run/{r}/downgrade", berth.Envelope(provider_state={"x": 1}, run_id="no-secret-here"))
            expect(berth.IntegrityError, resealer.load, f"run/{r}/downgrade")
            expect(berth.IntegrityError, plain.load, f"run/{r}/10")
            plain.close()
            other = berth.open_store(url, identity="other", sealer=rotated)
            other.save(f"run/{r}/9", big_envelope(f"run-{r}-o", size=500))
            moved = other.backend.get(f"other/run/{r}/9")
            assert moved is not None
            other.backend.put(f"leak/run/{r}/9", bytes(moved[0]))
            expect(berth.IntegrityError, resealer.load, f"run/{r}/9")
            other.close()
            # refused input: bad keys, bad envelopes, a limit, a config drift
            expect(berth.InvalidKey, store.save, "../" + "x", big_envelope())
            expect(berth.InvalidEnvelope, berth.Envelope, provider_state=b'{"a": "' + MARKER.encode())
            expect(berth.InvalidEnvelope, berth.Envelope, provider_state={"a": MARKER, "b": object()})
            expect(berth.InvalidEnvelope, berth.Envelope, provider_state={"a": MARKER + "\ud800"})
            small = berth.open_store(url, identity="leak", sealer=rotated, max_envelope_bytes=512)
            expect(berth.EnvelopeTooLarge, small.save, "big", big_envelope(size=4000))
            small.close()
            expect(berth.ConfigDrift, berth.check_resumable, big_envelope(), provider="x", model="y", config_digest="z")
            # scanned while the store is open: the WAL and SHM exist now
            result.trials += scan_tree(store_dir, result)
        store.close()
        result.trials += scan_tree(store_dir, result)
        result.trials += scan_tree(root, result, modes=False)
        mode = (root / "store-keys.json").stat().st_mode & 0o777
        if mode != 0o600:
            result.fail(f"keyring file has mode {oct(mode)}")
    finally:
        os.umask(old_umask)
        logging.getLogger().removeHandler(capture)
        berth_log.setLevel(old_level)
    for text in messages:
        result.trials += 1
        if leaked_in_text(text):
            result.fail(f"marker in an error message: {text[:200]!r}")
    for line in capture.lines:
        result.trials += 1
        if leaked_in_text(line):
            result.fail(f"marker in a log record: {line[:200]!r}")
    if not messages:
        result.fail("no error path ran")
    return result


@pytest.mark.parametrize("kind", BACKENDS)
def test_sealed_run_leaks_nothing_and_modes_are_tight(kind: str, tmp_path: Path) -> None:
    run_leaks(kind, tmp_path / "run").check()


@pytest.mark.slow
@pytest.mark.parametrize("kind", BACKENDS)
def test_sealed_run_leaks_nothing_long(kind: str, tmp_path: Path) -> None:
    run_leaks(kind, tmp_path / "run", rounds=20).check()


def test_sqlite_wal_shm_and_lock_are_0600_under_umask_0(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = berth.open_store(
            f"sqlite:///{tmp_path}/s/b.db", identity="leak", sealer=berth.AesGcmSealer(berth.Keyring.generate())
        )
        store.save("k", big_envelope())
        names = sorted(p.name for p in (tmp_path / "s").iterdir())
        assert names == ["b.db", "b.db-lock", "b.db-shm", "b.db-wal"]  # -lock: writers take turns on it
        for p in (tmp_path / "s").iterdir():
            assert p.stat().st_mode & 0o777 == 0o600, p
        store.close()
    finally:
        os.umask(old)


def test_the_marker_is_really_planted(tmp_path: Path) -> None:
    """The scan can see a leak: a plaintext store's files do hold the marker."""
    store = berth.open_store(f"file://{tmp_path}/s", identity="leak", sealer=berth.PlaintextSealer())
    store.save("k", big_envelope())
    result = Result("self-test", "file")
    scan_tree(tmp_path / "s", result)
    assert result.failures == 1 and "marker" in result.notes[0]
