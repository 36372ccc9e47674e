from __future__ import annotations

import functools
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

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
    with pytest.raises(berth.IntegrityError):  # tampering, not an outage a host would retry
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
    with pytest.raises(berth.IntegrityError):
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


# --- issue 12.5: the file backend does not trust the directory ------------------------------


def _in_thread(fn, timeout: float = 10.0):
    """Run `fn` in a daemon thread; its result or exception, or fail if it hangs (a FIFO read would)."""
    import threading

    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the call hung"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_a_symlink_in_place_of_the_identity_directory_is_never_followed(tmp_path) -> None:
    root, outside = tmp_path / "s", tmp_path / "outside"
    store = berth.open_store(f"file://{root}", identity="victim", sealer=berth.PlaintextSealer())
    store.save("k", make_envelope(deadline=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    os.rename(root / "victim", outside)  # the real files now live outside the store
    (root / "victim").symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    for store_ in (store, berth.open_store(f"file://{root}", identity="victim", sealer=berth.PlaintextSealer())):
        with pytest.raises(berth.IntegrityError, match="not a plain directory"):
            store_.load("k", allow_expired=True)
        with pytest.raises(berth.IntegrityError, match="not a plain directory"):
            store_.claim("k")
        with pytest.raises(berth.IntegrityError, match="not a plain directory"):
            store_.sweep()
        with pytest.raises(berth.IntegrityError):
            list(store_.list())
        with pytest.raises(berth.IntegrityError):
            store_.save("k2", make_envelope())
    assert sorted(p.name for p in outside.iterdir()) == before, "nothing outside the store was touched"


def test_a_fifo_planted_as_a_frame_never_blocks(tmp_path) -> None:
    store = berth.open_store(f"file://{tmp_path}/s", identity="id", sealer=berth.PlaintextSealer())
    store.save("k", make_envelope())
    store.save("other", make_envelope("other"))
    assert isinstance(store.backend, FileBackend)
    frame = Path(store.backend._paths("id/k")[1])
    parked = store.load("k")
    assert parked is not None
    token = parked.token
    frame.unlink()
    os.mkfifo(frame, 0o600)
    for call in (lambda: store.load("k"), lambda: store.claim("k"), lambda: store.delete("k", token)):
        with pytest.raises((berth.IntegrityError, berth.TokenMismatch)) as info:
            _in_thread(call)
        if not isinstance(info.value, berth.TokenMismatch):
            assert "not a regular file" in str(info.value)
    items = {i.key: i.error for i in _in_thread(lambda: list(store.list()))}
    assert items["other"] is None
    assert "not a regular file" in (items[frame.name] or ""), "listed, flagged, never hidden"
    assert _in_thread(store.sweep) == 0
    assert _in_thread(lambda: store.load("other")) is not None, "the lock stripe was not held forever"


def test_a_changed_or_swapped_record_is_tampering_not_an_outage(tmp_path) -> None:
    store = berth.open_store(f"file://{tmp_path}/s", identity="id", sealer=berth.PlaintextSealer())
    store.save("a", make_envelope("a"))
    store.save("b", make_envelope("b"))
    backend = store.backend
    assert isinstance(backend, FileBackend)
    path_a, path_b = (backend._paths(f"id/{k}")[1] for k in ("a", "b"))
    data_a, original_b = Path(path_a).read_bytes(), Path(path_b).read_bytes()
    with open(path_b, "wb") as f:  # a's whole file copied over b's: another name inside
        f.write(data_a)
    with pytest.raises(berth.IntegrityError, match="swapped"):
        store.load("b")
    for changed, error in (
        (b"XXXX" + original_b[4:], berth.FormatError),  # magic
        (original_b[:3], berth.FormatError),  # truncated
        (original_b[:4] + bytes(8) + original_b[12:], berth.IntegrityError),  # generation 0
    ):
        with open(path_b, "wb") as f:
            f.write(changed)
        with pytest.raises(error):
            store.load("b")
        with pytest.raises(error):
            store.claim("b")
    listed = {i.key: i.error for i in store.list()}
    assert listed.get("a") is None and len(listed) == 2 and sum(1 for e in listed.values() if e) == 1


def test_a_store_directory_is_created_with_its_parents_0700_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        store = berth.open_store(f"file://{tmp_path}/x/y/z", identity="id", sealer=berth.PlaintextSealer())
        store.save("k", make_envelope())
    finally:
        os.umask(old)
    for d in (tmp_path / "x", tmp_path / "x" / "y", tmp_path / "x" / "y" / "z"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    assert store.load("k") is not None
