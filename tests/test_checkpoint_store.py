"""`berth.checkpoint_store`: the ADR's put/get seam, sealed, bound to its key, with tamper-evident locations."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import berth
from berth._checkpoint_store import CheckpointStore
from berth.testing import FakeClock, RecordingBackend

SECRET = b'{"blackboard":{"customer":"Ada Lovelace, card 4111"}}'


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'berth.db'}"


@pytest.fixture
def sealer() -> berth.AesGcmSealer:
    return berth.AesGcmSealer(berth.Keyring.generate())


def tenant(url: str, identity: str, sealer: berth.Sealer, **kw: object) -> CheckpointStore:
    return berth.checkpoint_store(berth.open_store(url, identity=identity, sealer=sealer), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        SECRET,
        b"",
        b"\x00\xff\xfe binary",
        b' {"spaced": true} \n',
        b"[1,2,3]",
        b'"a string"',
        b"null",
        bytes(range(256)),
    ],
)
def test_put_get_round_trips_any_bytes_sealed(url: str, sealer: berth.Sealer, data: bytes) -> None:
    cs = tenant(url, "acme", sealer)
    assert isinstance(cs, CheckpointStore)
    location = cs.put(data, key="turn-120501-000123.json")
    assert isinstance(location, str) and location.startswith("berth:acme/")
    got = cs.get(location)
    assert got == data and type(got) is bytes
    assert tenant(url, "acme", sealer).get(location) == data, "another handle on the same store resolves it"


def test_nothing_readable_at_rest(tmp_path: Path, sealer: berth.Sealer) -> None:
    url = f"file://{tmp_path}"
    cs = tenant(url, "acme", sealer)
    cs.put(SECRET, key="run-1")
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert stored and b"Ada Lovelace" not in stored and b"blackboard" not in stored


def test_a_location_resolves_in_another_process(url: str, tmp_path: Path) -> None:
    ring = tmp_path / "keys.json"
    berth.Keyring.generate().save(ring)
    sealer = berth.AesGcmSealer(berth.Keyring.load(ring))
    location = tenant(url, "acme", sealer).put(SECRET, key="run-1")
    code = (
        "import sys, berth\n"
        "sealer = berth.AesGcmSealer(berth.Keyring.load(sys.argv[2]))\n"
        "s = berth.open_store(sys.argv[1], identity='acme', sealer=sealer)\n"
        "sys.stdout.buffer.write(berth.checkpoint_store(s).get(sys.argv[3]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, url, str(ring), location], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == SECRET


def test_a_changed_or_forged_location_never_reads_another_key(url: str, sealer: berth.Sealer) -> None:
    cs = tenant(url, "acme", sealer)
    mine = cs.put(b'"mine"', key="run-1")
    theirs = cs.put(SECRET, key="run-2")
    forged = [
        mine.replace("run-1", "run-2"),  # another key, my nonce
        theirs[:-1] + ("0" if theirs[-1] != "0" else "1"),  # a changed nonce
        theirs.rpartition("#")[0] + "#" + "0" * 32,  # a guessed nonce
        theirs.replace("berth:acme/", "berth:other/"),  # another identity
        theirs.rpartition("#")[0],  # no nonce
        theirs.replace("berth:", "file:"),
        "berth:acme/#" + "0" * 32,
        "berth:acme/../x#" + "0" * 32,
        "",
        "not a location",
    ]
    for location in forged:
        with pytest.raises(berth.IntegrityError) as err:
            cs.get(location)
        message = str(err.value)
        assert "acme" in message and "\n" not in message
        assert "Ada" not in message and "mine" not in message
    with pytest.raises(TypeError):
        cs.get(b"berth:acme/run-1")  # type: ignore[arg-type]
    assert cs.get(mine) == b'"mine"' and cs.get(theirs) == SECRET


def test_a_later_put_supersedes_the_earlier_location(url: str, sealer: berth.Sealer) -> None:
    cs = tenant(url, "acme", sealer)
    first = cs.put(b'"first"', key="run-1")
    second = cs.put(b'"second"', key="run-1")
    assert first != second
    assert cs.get(second) == b'"second"'
    with pytest.raises(berth.IntegrityError, match="superseded"):
        cs.get(first)


def test_a_tampered_frame_is_refused(tmp_path: Path, sealer: berth.Sealer) -> None:
    cs = tenant(f"file://{tmp_path}", "acme", sealer)
    location = cs.put(SECRET, key="run-1")
    (frame,) = tmp_path.rglob("*.frame")
    data = bytearray(frame.read_bytes())
    data[-5] ^= 1
    frame.write_bytes(bytes(data))
    with pytest.raises(berth.IntegrityError):
        cs.get(location)


def test_tenants_have_their_own_keys(url: str) -> None:
    acme_sealer = berth.AesGcmSealer(berth.Keyring.generate())
    globex_sealer = berth.AesGcmSealer(berth.Keyring.generate())
    acme, globex = tenant(url, "acme", acme_sealer), tenant(url, "globex", globex_sealer)
    location = acme.put(SECRET, key="run-1")
    with pytest.raises(berth.IntegrityError, match="identity 'acme'"):
        globex.get(location)
    with pytest.raises(berth.TokenMismatch, match="identity 'globex'"):
        globex.get(location.replace("berth:acme/", "berth:globex/"))  # globex has nothing there
    # acme's identity with globex's sealer: the frame does not open
    with pytest.raises(berth.IntegrityError):
        tenant(url, "acme", globex_sealer).get(location)
    assert acme.get(location) == SECRET


def test_deleted_and_expired_checkpoints(url: str, sealer: berth.Sealer) -> None:
    clock = FakeClock()
    store = berth.open_store(url, identity="acme", sealer=sealer, clock=clock)
    cs = berth.checkpoint_store(store, ttl=timedelta(hours=1))
    location = cs.put(SECRET, key="run-1")
    clock.advance(timedelta(minutes=59))
    assert cs.get(location) == SECRET
    clock.advance(timedelta(minutes=2))
    with pytest.raises(berth.Expired):
        cs.get(location)
    assert store.sweep() == 1
    with pytest.raises(berth.TokenMismatch, match="never put"):
        cs.get(location)


def test_bad_input_fails_before_io(sealer: berth.Sealer) -> None:
    backend = RecordingBackend(berth.open_store("memory://", identity="acme").backend)
    cs = berth.checkpoint_store(berth.Store(backend, identity="acme", sealer=sealer))
    for key in ("", "../x", "a//b", "a\x00b"):
        with pytest.raises(berth.InvalidKey):
            cs.put(b"{}", key=key)
    with pytest.raises(TypeError):
        cs.put("text", key="run-1")  # type: ignore[arg-type]
    assert backend.calls == []
    with pytest.raises(TypeError):
        berth.checkpoint_store(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        berth.checkpoint_store(berth.Store(backend, identity="acme", sealer=sealer), ttl=timedelta(0))


def test_prefix_keeps_checkpoints_apart_from_parked_runs(url: str, sealer: berth.Sealer) -> None:
    store = berth.open_store(url, identity="acme", sealer=sealer)
    location = berth.checkpoint_store(store).put(SECRET, key="run-1")
    assert [item.key for item in store.list()] == ["checkpoints/run-1"]
    assert store.load("run-1") is None
    assert berth.checkpoint_store(store, prefix="").get(location) == SECRET, "the location carries the full key"
