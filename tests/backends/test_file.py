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
    assert isinstance(store.backend, FileBackend)
    frame = Path(store.backend._paths("id/k")[1])
    target = tmp_path / "secret.txt"
    target.write_text("not yours")
    frame.unlink()
    frame.symlink_to(target)
    with pytest.raises(berth.IntegrityError):
        store.load("k")


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path) -> None:
    backend = FileBackend(str(tmp_path / "s"))
    backend.put("id/k", b"data")
    d = Path(backend._paths("id/k")[0])
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


@pytest.mark.parametrize("layout", ["ordered", "legacy"])
def test_a_symlink_in_place_of_the_identity_directory_is_never_followed(tmp_path, layout: str) -> None:
    root, outside = tmp_path / "s", tmp_path / "outside"
    if layout == "legacy":  # the identity directory an older berth made
        (root / "victim").mkdir(parents=True)
    store = berth.open_store(f"file://{root}", identity="victim", sealer=berth.PlaintextSealer())
    store.save("k", make_envelope(deadline=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    assert isinstance(store.backend, FileBackend)
    directory = Path(store.backend._paths("victim/k")[0])
    assert directory.name == ("victim" if layout == "legacy" else "victim@2")
    os.rename(directory, outside)  # the real files now live outside the store
    directory.symlink_to(outside)
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
    assert "not a regular file" in (items["k"] or ""), "listed under its key, flagged, never hidden"
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


# --- issue 15.2: the ordered layout (file names sort as keys) and the legacy one it reads -------------


_KEYS = [
    "a",
    "a/b",
    "a-c",
    "a/b/c",
    "ab",
    "é",
    "日本/語",
    "\U0001f600",
    "Z",
    "~x",
    "a\u00ff",
    "a\u0100",
    "x" * 124,
    "x" * 125,
]


def _bytewise(keys):
    return sorted(keys, key=lambda k: k.encode())


def _as_legacy(root: Path, identity: str) -> None:
    """Move an identity's files into the legacy layout, as an older berth wrote them (`{sha256(name)}.frame`)."""
    import hashlib

    ordered_dir, legacy_dir = root / f"{identity}@2", root / identity
    legacy_dir.unlink()  # the ordered layout's marker
    legacy_dir.mkdir(mode=0o700)
    for f in ordered_dir.iterdir():
        data = f.read_bytes()
        nlen = int.from_bytes(data[12:14], "big")
        name = data[14 : 14 + nlen].decode()
        (legacy_dir / f"{hashlib.sha256(name.encode()).hexdigest()}.frame").write_bytes(data)
        f.unlink()
    ordered_dir.rmdir()


def test_ordered_layout_file_names_sort_as_keys_and_a_long_key_is_hashed(tmp_path) -> None:
    store = berth.open_store(f"file://{tmp_path}/s", identity="id", sealer=berth.PlaintextSealer())
    for key in _KEYS:
        store.save(key, make_envelope(key))
    files = sorted(p.name for p in (tmp_path / "s" / "id@2").iterdir())
    assert f"k{b'a/b'.hex()}.frame" in files
    assert sum(1 for f in files if not f.startswith("k")) == 1, "only the 125-byte key is hashed"
    assert (tmp_path / "s" / "id").is_file(), "the marker an older berth stumbles on"
    assert [i.key for i in store.list()] == _bytewise(_KEYS)
    assert [i.key for i in store.list(reverse=True)] == _bytewise(_KEYS)[::-1]
    assert [i.key for i in store.list("a/")] == ["a/b", "a/b/c"]
    assert [i.key for i in store.list("a", limit=3)] == _bytewise([k for k in _KEYS if k.startswith("a")])[:3]
    assert [i.key for i in store.list("x")] == ["x" * 124, "x" * 125]
    assert [i.key for i in store.list("x" * 125)] == ["x" * 125]
    assert all(i.error is None for i in store.list())


def test_ordered_listing_spills_past_its_memory_and_stays_in_order(tmp_path, monkeypatch) -> None:
    import berth.backends._bulk as bulk

    monkeypatch.setattr(bulk, "_SORT_MEMORY", 64)
    backend = FileBackend(str(tmp_path / "s"), fsync=False)
    names = [f"id/{k}{i}" for i in range(120) for k in ("é", "a/", "b")] + ["id/" + "y" * 200]
    for name in names:
        backend.put(name, b"frame of " + name.encode())
    for reverse in (False, True):
        rows = list(backend.sorted_heads("id/", 9, limit=None, reverse=reverse))
        assert [r[0] for r in rows] == sorted(names, reverse=reverse)
        assert all(r[1] == b"frame of " for r in rows)
    assert list(tmp_path.joinpath("s").glob("tmp*")) == [], "the spill file has no name"


def test_a_legacy_store_is_read_written_and_listed_as_it_is(tmp_path) -> None:
    root = tmp_path / "s"
    store = berth.open_store(f"file://{root}", identity="id", sealer=berth.PlaintextSealer())
    for key in _KEYS:
        store.save(key, make_envelope(key))
    store.close()
    _as_legacy(root, "id")
    old = berth.open_store(f"file://{root}", identity="id", sealer=berth.PlaintextSealer())
    assert [i.key for i in old.list()] == _bytewise(_KEYS)
    assert [i.key for i in old.list("a/", reverse=True)] == ["a/b/c", "a/b"]
    parked = old.load("a/b")
    assert parked is not None and parked.envelope.run_id == "a/b"
    old.delete("a/b", parked.token)
    old.save("new", make_envelope("new"))
    assert old.claim("é") is not None
    assert not (root / "id@2").exists(), "a legacy identity stays legacy"
    assert all(len(p.name) == 70 for p in (root / "id").iterdir()), "hashed names only"
    want = _bytewise([k for k in _KEYS if k not in ("a/b", "é")] + ["new"])
    assert [i.key for i in old.list()] == want
    # another identity of the same store directory starts in the ordered layout
    other = berth.open_store(f"file://{root}", identity="other", sealer=berth.PlaintextSealer())
    other.save("k", make_envelope())
    assert (root / "other@2").is_dir() and (root / "other").is_file()


def test_an_older_berth_cannot_write_beside_the_ordered_layout(tmp_path) -> None:
    root = tmp_path / "s"
    store = berth.open_store(f"file://{root}", identity="id", sealer=berth.PlaintextSealer())
    store.save("k", make_envelope())
    # an older berth makes `{root}/id` a directory and writes its frames in it: the marker is in the way
    with pytest.raises(FileExistsError):
        os.mkdir(root / "id", 0o700)
    # both layouts at once (the marker removed by hand, say) is refused, never half-listed
    (root / "id").unlink()
    (root / "id").mkdir()
    fresh = berth.open_store(f"file://{root}", identity="id", sealer=berth.PlaintextSealer())
    with pytest.raises(berth.IntegrityError, match="both layouts"):
        fresh.load("k")


def test_ordered_files_renamed_or_planted_are_flagged_in_place(tmp_path) -> None:
    store = berth.open_store(f"file://{tmp_path}/s", identity="id", sealer=berth.PlaintextSealer())
    for key in ("a", "b", "j"):
        store.save(key, make_envelope(key))
    d = tmp_path / "s" / "id@2"
    (d / f"k{b'b'.hex()}.frame").rename(d / f"k{b'bb'.hex()}.frame")  # b's record under bb's name
    (d / "kzz.frame").write_bytes(b"junk")  # not hex
    (d / "k6A.frame").write_bytes((d / "k6a.frame").read_bytes())  # j's record, upper-case hex: a copy
    listed = [(i.key, i.error) for i in store.list()]
    assert [k for k, _ in listed] == ["a", "bb", "j", "j", "kzz.frame"]
    errors = dict(listed[:2] + listed[3:])
    assert errors["a"] is None and listed[3] == ("j", None)
    assert "swapped" in (errors["bb"] or "")
    assert "another file name" in (listed[2][1] or ""), "the copy is flagged, the key itself is fine"
    assert "names no key" in (errors["kzz.frame"] or "")
    with pytest.raises(berth.IntegrityError, match="swapped"):
        store.load("bb")
    assert store.claim("j") is not None


def test_listing_while_another_thread_claims_yields_each_key_once_in_order(tmp_path) -> None:
    import threading

    store = berth.open_store(f"file://{tmp_path}/s", identity="id", sealer=berth.PlaintextSealer(), fsync=False)
    keys = [f"t/{i:04d}" for i in range(600)]
    for key in keys:
        store.save(key, make_envelope(key))
    claimed: list[str] = []

    def claim_odd() -> None:
        for key in keys[1::2]:
            if store.claim(key) is not None:
                claimed.append(key)

    t = threading.Thread(target=claim_odd)
    t.start()
    listed = [i for i in store.list("t/")]
    t.join()
    got = [i.key for i in listed]
    assert got == sorted(set(got)), "in order, each once"
    assert set(keys[::2]) <= set(got), "nothing that stayed parked is missed"
    assert all(i.error is None for i in listed), "a file claimed meanwhile is skipped, never flagged"
    assert sorted(claimed) == keys[1::2]
