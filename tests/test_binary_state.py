"""Binary state: an envelope whose `provider_state` is opaque bytes under a `content_type`, in frame format 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import berth
from berth import _codec
from berth._codec import PREFIX_SIZE, peek_header
from berth._format import envelope_doc
from berth._sealer import LARGE_FRAME
from berth.backends.memory import MemoryBackend
from tests.vectors import make_vectors as kat

VECTORS = Path(__file__).parent / "vectors"
NAME = f"{kat.IDENTITY}/{kat.KEY}"
SEALERS = ["plaintext", "aes-gcm"]


def _store(sealer: str) -> berth.Store:
    return berth.Store(MemoryBackend(), identity=kat.IDENTITY, sealer=kat.sealers()[sealer])


def _planted(sealer: str, frame: bytes) -> berth.Store:
    store = _store(sealer)
    store.backend.put(NAME, frame)
    return store


@pytest.mark.parametrize("name", SEALERS)
def test_binary_frame_matches_its_committed_vector_and_opens(name: str) -> None:
    committed = (VECTORS / f"binary-{name}.frame").read_bytes()
    assert kat.frame(kat.sealers()[name], kat.binary_envelope()) == committed, (
        "the binary frame format changed: regenerate tests/vectors with make_vectors.py only if intended"
    )
    parked = _planted(name, committed).load(kat.KEY)
    assert parked is not None and parked.envelope == kat.binary_envelope()
    assert parked.envelope.provider_state == kat.BINARY_STATE and parked.envelope.content_type == kat.CONTENT_TYPE


@pytest.mark.parametrize("name", SEALERS)
def test_json_state_is_still_written_in_format_1(name: str) -> None:
    assert kat.frame(kat.sealers()[name])[8] == 1
    assert kat.frame(kat.sealers()[name], kat.binary_envelope())[8] == 2


def test_binary_frame_layout_is_the_envelope_json_then_the_state_as_it_is() -> None:
    frame = (VECTORS / "binary-plaintext.frame").read_bytes()
    assert frame[8] == 2
    header, end = peek_header(frame, kat.IDENTITY, kat.KEY)
    assert header.format == 2 and header.state_len == len(kat.BINARY_STATE)
    assert b"msgpack" not in frame[:end]  # the content type is sealed, not in the cleartext header
    body = frame[end:-32]  # PlaintextSealer: the body, then its SHA-256
    assert len(body) == header.body_len and body.endswith(kat.BINARY_STATE)  # no base64, no JSON around it
    meta = json.loads(body[: -len(kat.BINARY_STATE)])
    assert meta["content_type"] == kat.CONTENT_TYPE and "provider_state" not in meta
    assert meta["run_id"] == "run-7" and list(meta)[-1] == "content_type"


def test_binary_state_hides_in_a_sealed_frame() -> None:
    frame = (VECTORS / "binary-aes-gcm.frame").read_bytes()
    assert kat.BINARY_STATE not in frame and b"may I merge" not in frame and b"msgpack" not in frame


@pytest.mark.parametrize("name", SEALERS)
@pytest.mark.parametrize("size", [0, 1, 5000, LARGE_FRAME + 3])
def test_binary_state_round_trips_untouched(name: str, size: int) -> None:
    state = bytes(i % 251 for i in range(size))  # every byte value, NUL and non-UTF-8 included
    store = _store(name)
    store.save("k", berth.Envelope(provider_state=bytearray(state), content_type="application/octet-stream"))
    parked = store.load("k")
    assert parked is not None and type(parked.envelope.provider_state) is bytes
    assert parked.envelope.provider_state == state and parked.envelope.content_type == "application/octet-stream"
    (listed,) = store.list()
    assert listed.key == "k" and listed.error is None
    assert store.claim("k") == parked.envelope and store.load("k") is None


def test_a_changed_content_type_does_not_open() -> None:
    frame = (VECTORS / "binary-plaintext.frame").read_bytes()
    changed = frame.replace(b"application/msgpack", b"application/protobu")
    assert changed != frame and len(changed) == len(frame)
    with pytest.raises(berth.IntegrityError) as info:
        _planted("plaintext", changed).load(kat.KEY)
    assert info.value.key == kat.KEY


@pytest.mark.parametrize("name", SEALERS)
def test_a_changed_version_byte_does_not_open(name: str) -> None:
    frame = (VECTORS / f"binary-{name}.frame").read_bytes()
    as_json = frame[:8] + b"\x01" + frame[9:]  # format 1 announced, the header says 2
    with pytest.raises(berth.IntegrityError):
        _planted(name, as_json).load(kat.KEY)
    newer = frame[:8] + b"\x03" + frame[9:]
    with pytest.raises(berth.FormatError, match="format version 3"):
        _planted(name, newer).load(kat.KEY)
    # both rewritten to format 1: the header is the seal's associated data
    head = frame[: PREFIX_SIZE + int.from_bytes(frame[9:13], "big")]
    downgraded = (frame[:8] + b"\x01" + head[9:].replace(b'"format":2', b'"format":1')) + frame[len(head) :]
    assert downgraded != frame
    with pytest.raises(berth.IntegrityError):
        _planted(name, downgraded).load(kat.KEY)
    json_frame = kat.frame(kat.sealers()[name])
    upgraded = json_frame[:8] + b"\x02" + json_frame[9:].replace(b'"format":1', b'"format":2', 1)
    with pytest.raises((berth.IntegrityError, berth.FormatError)):
        _planted(name, upgraded).load(kat.KEY)


@pytest.mark.parametrize("name", SEALERS)
def test_a_berth_that_reads_format_1_only_refuses_format_2_and_leaves_it(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = (VECTORS / f"binary-{name}.frame").read_bytes()
    store = _planted(name, frame)
    monkeypatch.setattr(_codec, "READ_FORMATS", (1,))  # the version check of a berth before binary state
    with pytest.raises(berth.FormatError, match="format version 2; this berth reads 1: upgrade") as info:
        store.load(kat.KEY)
    assert info.value.key == kat.KEY and info.value.identity == kat.IDENTITY
    with pytest.raises(berth.FormatError):
        store.claim(kat.KEY)
    assert store.sweep() == 0
    found = store.backend.get(NAME)
    assert found is not None and bytes(found[0]) == frame  # left for a berth that reads it
    json_frame = (VECTORS / f"{name}.frame").read_bytes()
    assert _planted(name, json_frame).load(kat.KEY) is not None  # format 1 still opens


def test_content_type_and_binary_state_are_checked_before_io() -> None:
    for bad in ("", " ", "a b", "x" * 256, "caf\u00e9/x", "a\nb", 3):
        with pytest.raises(berth.InvalidEnvelope, match="content_type"):
            berth.Envelope(provider_state=b"x", content_type=bad)  # type: ignore[arg-type]
    for state in ("text", {"a": 1}, [1], None):
        with pytest.raises(berth.InvalidEnvelope, match="must be bytes"):
            berth.Envelope(provider_state=state, content_type="application/x")
    # JSON state is unchanged: bytes without a content type must be JSON
    with pytest.raises(berth.InvalidEnvelope, match="not valid JSON"):
        berth.Envelope(provider_state=b"\x81\xa1a\x01")


def test_a_binary_envelope_says_what_it_holds_and_never_shows_it() -> None:
    env = kat.binary_envelope()
    assert "application/msgpack" in repr(env) and "merge" not in repr(env)
    with pytest.raises(berth.InvalidEnvelope, match="binary state"):
        env.state()
    assert env.replace(turn=3).content_type == kat.CONTENT_TYPE
    assert env != kat.envelope() and kat.envelope().content_type is None
    doc = envelope_doc(kat.KEY, env)
    assert doc["content_type"] == kat.CONTENT_TYPE and isinstance(doc["provider_state"], str)
    assert envelope_doc(kat.KEY, kat.envelope())["content_type"] is None
