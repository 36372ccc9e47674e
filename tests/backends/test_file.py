from __future__ import annotations

import functools
import os
import stat

import pytest

import berth
from berth.backends.file import FileBackend
from berth.testing import AsyncStoreContract, StoreContract, make_envelope


class TestFileContract(StoreContract):
    @pytest.fixture
    def backend_opener(self, tmp_path):
        return functools.partial(FileBackend, str(tmp_path / "store"))


class TestFileAsyncContract(AsyncStoreContract, TestFileContract):
    """The same cases through berth.aio (this backend in worker threads)."""


def _modes(root):
    for dirpath, _dirnames, filenames in os.walk(root):
        yield dirpath, stat.S_IMODE(os.stat(dirpath).st_mode), True
        for f in filenames:
            p = os.path.join(dirpath, f)
            yield p, stat.S_IMODE(os.stat(p).st_mode), False


def test_files_0600_and_dirs_0700_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        store = berth.open_store(f"file://{tmp_path}/s", identity="pr-bot", sealer=berth.PlaintextSealer())
        store.save("org/repo#1", make_envelope())
    finally:
        os.umask(old)
    seen = list(_modes(tmp_path / "s"))
    assert any(not is_dir for _, _, is_dir in seen)
    for path, mode, is_dir in seen:
        assert mode == (0o700 if is_dir else 0o600), (path, oct(mode))


def test_keys_cannot_leave_the_identity_directory(tmp_path) -> None:
    store = berth.open_store(f"file://{tmp_path}/s", identity="a", sealer=berth.PlaintextSealer())
    for key in ("x/..y", "..a/b", "%2e%2e/x", "a\\..\\..\\b", "~/x"):
        store.save(key, make_envelope())
    for dirpath, _, filenames in os.walk(tmp_path):
        for f in filenames:
            full = os.path.join(dirpath, f)
            assert full.startswith(str(tmp_path / "s") + os.sep)


def test_planted_symlink_directory_is_refused(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "s"
    root.mkdir()
    (root / "victim").symlink_to(outside)
    store = berth.open_store(f"file://{root}", identity="victim", sealer=berth.PlaintextSealer())
    with pytest.raises(berth.BackendError):
        store.save("k", make_envelope())
    assert list(outside.iterdir()) == []


def test_planted_symlink_file_is_refused(tmp_path) -> None:
    store = berth.open_store(f"file://{tmp_path}/s", identity="id", sealer=berth.PlaintextSealer())
    store.save("k", make_envelope())
    frame = next((tmp_path / "s" / "id").glob("*.frame"))
    target = tmp_path / "secret.txt"
    target.write_text("not yours")
    frame.unlink()
    frame.symlink_to(target)
    with pytest.raises(berth.BackendError):
        store.load("k")


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path) -> None:
    backend = FileBackend(str(tmp_path / "s"))
    backend.put("id/k", b"data")
    d = tmp_path / "s" / "id"
    (d / ".tmp-999999999-abcdef").write_bytes(b"torn")
    FileBackend(str(tmp_path / "s")).put("id/k2", b"data")
    assert not (d / ".tmp-999999999-abcdef").exists()


def test_relative_path_is_refused() -> None:
    with pytest.raises(berth.BerthError):
        FileBackend("relative/dir")
