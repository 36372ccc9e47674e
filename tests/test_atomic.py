"""The one atomic-write helper (issue 12.8): temp + fsync + rename + fsync dir, 0600/0700 whatever the umask."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

import berth
from berth._atomic import make_dirs, write_atomic
from berth.testing import make_envelope


def _temps(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if ".tmp" in p.name]


def _killed_mid_write(write) -> int:
    """Fork a child that runs `write` and is SIGKILLed at its first fsync; returns its pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        try:
            write()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return pid


def test_a_killed_keyring_save_leaves_no_secret_behind_after_the_next_save_or_load(tmp_path) -> None:
    path = tmp_path / "keys.json"
    berth.Keyring.generate().save(path)
    secret = berth.Keyring.generate()
    _killed_mid_write(lambda: secret.save(path))
    left = _temps(tmp_path)
    assert left, "the kill landed mid-save (a temp file holds the keyring)"
    berth.Keyring.load(path)  # a load removes it ...
    assert _temps(tmp_path) == []
    _killed_mid_write(lambda: secret.save(path))
    berth.Keyring.generate().save(path)  # ... and so does the next save
    assert _temps(tmp_path) == []


def test_keyring_save_fsyncs_the_file_and_its_directory(tmp_path, monkeypatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    berth.Keyring.generate().save(tmp_path / "keys.json")
    assert synced == ["file", "dir"]


def test_keyring_and_checkpoint_directories_are_0700_files_0600_under_umask_0(tmp_path) -> None:
    old = os.umask(0)
    try:
        berth.Keyring.generate().save(tmp_path / "a" / "b" / "keys.json")
        berth.save_checkpoint(tmp_path / "c" / "d" / "run.frame", make_envelope(), sealer=berth.PlaintextSealer())
    finally:
        os.umask(old)
    for d in ("a", "a/b", "c", "c/d"):
        assert stat.S_IMODE(os.stat(tmp_path / d).st_mode) == 0o700, d
    for f in ("a/b/keys.json", "c/d/run.frame"):
        assert stat.S_IMODE(os.stat(tmp_path / f).st_mode) == 0o600, f
    assert berth.load_checkpoint(tmp_path / "c" / "d" / "run.frame", sealer=berth.PlaintextSealer()).run_id == "run-1"


def test_a_failed_write_removes_its_temp_and_keeps_the_old_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "f"
    write_atomic(path, b"old")

    def fail(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_atomic(path, [b"new", b" parts"])
    assert path.read_bytes() == b"old" and _temps(tmp_path) == []


def test_a_symlink_at_the_target_is_replaced_never_followed(tmp_path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    (tmp_path / "f").symlink_to(victim)
    write_atomic(tmp_path / "f", b"data")
    assert victim.read_bytes() == b"untouched" and not (tmp_path / "f").is_symlink()


def test_make_dirs_refuses_a_file_where_a_directory_belongs(tmp_path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "file")
    with pytest.raises(OSError):
        make_dirs(tmp_path / "file" / "below")
