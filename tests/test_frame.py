"""Known-answer frame vectors and the frame layout."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

import berth
from berth import _codec
from berth._codec import MAGIC, PREFIX_SIZE, peek_header
from berth.backends.memory import MemoryBackend
from tests.vectors import make_vectors as kat

VECTORS = Path(__file__).parent / "vectors"


@pytest.mark.parametrize("name", ["plaintext", "aes-gcm"])
def test_frame_format_matches_the_committed_vector(name: str) -> None:
    committed = (VECTORS / f"{name}.frame").read_bytes()
    assert kat.frame(kat.sealers()[name]) == committed, (
        "the frame format changed: if that is intended, keep the legacy vectors opening (or bump "
        "FORMAT_VERSION) and regenerate tests/vectors with make_vectors.py"
    )


@pytest.mark.parametrize("name", ["plaintext", "aes-gcm"])
def test_committed_vector_opens_to_the_envelope(name: str) -> None:
    store = berth.Store(MemoryBackend(), identity=kat.IDENTITY, sealer=kat.sealers()[name])
    store.backend.put(f"{kat.IDENTITY}/{kat.KEY}", (VECTORS / f"{name}.frame").read_bytes())
    parked = store.load(kat.KEY)
    assert parked is not None and parked.envelope == kat.envelope()


@pytest.mark.parametrize("name", ["plaintext", "aes-gcm"])
def test_pre_release_frames_without_a_state_length_are_refused_and_left(name: str) -> None:
    # Frames written before the header carried `state_len` (provider_state anywhere in the body)
    # were never released: they are a FormatError, and nothing deletes them.
    legacy = (VECTORS / f"legacy-{name}.frame").read_bytes()
    assert b'"state_len"' not in legacy
    store = berth.Store(MemoryBackend(), identity=kat.IDENTITY, sealer=kat.sealers()[name])
    store.backend.put(f"{kat.IDENTITY}/{kat.KEY}", legacy)
    with pytest.raises(berth.FormatError, match="pre-release") as info:
        store.load(kat.KEY)
    assert info.value.key == kat.KEY
    with pytest.raises(berth.FormatError):
        store.claim(kat.KEY)
    (listed,) = store.list()  # listed, flagged unreadable
    assert listed.error is not None and "pre-release" in listed.error
    assert store.reseal().failed == 1
    found = store.backend.get(f"{kat.IDENTITY}/{kat.KEY}")
    assert found is not None and found[0] == legacy


def test_frame_layout() -> None:
    frame = (VECTORS / "plaintext.frame").read_bytes()
    assert frame[:8] == MAGIC and frame[8] == 1
    hlen = int.from_bytes(frame[9:13], "big")
    header = json.loads(frame[PREFIX_SIZE : PREFIX_SIZE + hlen])
    assert header["identity"] == kat.IDENTITY and header["key"] == kat.KEY
    assert header["sealer"] == "plaintext" and header["body_len"] == len(frame) - PREFIX_SIZE - hlen - 32
    raw = frame[PREFIX_SIZE + hlen : -32]
    body = json.loads(raw)  # plaintext frames stay readable JSON
    assert body["provider_state"] == {"messages": [{"role": "user", "content": "may I merge?"}]}
    # provider_state is the body's last member, `state_len` bytes long, so a load cuts it out by offset
    assert list(body)[-1] == "provider_state"
    assert raw[-header["state_len"] - 1 : -1] == kat.envelope().provider_state


def test_sealed_frame_hides_the_body() -> None:
    frame = (VECTORS / "aes-gcm.frame").read_bytes()
    assert b"may I merge" not in frame and b"Merge #42" not in frame
    header, _ = peek_header(frame, kat.IDENTITY, kat.KEY)
    assert header.sealed_by == "aes-gcm:kat-key-1"


def test_nonces_are_fresh_per_seal() -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    a, b = sealer.seal(b"same", aad=b"x"), sealer.seal(b"same", aad=b"x")
    assert a != b


def test_split_aad_inverts_build_aad() -> None:
    from berth._codec import build_aad, encode_header, split_aad

    frame = (VECTORS / "plaintext.frame").read_bytes()
    header, end = peek_header(frame, kat.IDENTITY, kat.KEY)
    head = encode_header(header)
    assert split_aad(build_aad(head, "tenant-a", "ünï/k#1")) == ("tenant-a", "ünï/k#1")
    assert split_aad(b"not an aad") is None
    assert split_aad(build_aad(head, "a", "b") + b"x") is None


@pytest.mark.parametrize("name", ["plaintext", "aes-gcm"])
def test_a_witness_sequence_number_is_in_the_authenticated_header(name: str) -> None:
    from berth._codec import open_frame, seal_frame
    from berth._sealer import as_parts

    sealer = as_parts(kat.sealers()[name])
    env = kat.envelope()
    assert env.created_at is not None
    common = {"identity": kat.IDENTITY, "key": kat.KEY, "created_at": env.created_at, "sealer": sealer}
    plain = seal_frame(env, max_bytes=1 << 20, **common)  # type: ignore[arg-type]
    assert b'"seq"' not in plain and peek_header(plain, kat.IDENTITY, kat.KEY)[0].seq is None
    frame = seal_frame(env, max_bytes=1 << 20, seq=7, **common)  # type: ignore[arg-type]
    assert peek_header(frame, kat.IDENTITY, kat.KEY)[0].seq == 7
    assert open_frame(frame, identity=kat.IDENTITY, key=kat.KEY, sealer_for=lambda h: sealer) == env
    # the header length is unchanged by a one-digit edit: only the seal can tell
    edited = frame.replace(b'"seq":7', b'"seq":9')
    assert edited != frame
    with pytest.raises(berth.IntegrityError):
        open_frame(edited, identity=kat.IDENTITY, key=kat.KEY, sealer_for=lambda h: sealer)


class _OwnBuffer:
    """A plain `Sealer` (no fast path) whose `open` hands back a buffer it keeps and reuses."""

    name = "own-buffer"
    key_id = "k"

    def __init__(self) -> None:
        self.inner = berth.PlaintextSealer()
        self.buffer = bytearray()

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        return self.inner.seal(plaintext, aad=aad)

    def open(self, sealed: bytes, *, aad: bytes) -> bytearray:
        self.buffer[:] = self.inner.open(sealed, aad=aad)
        return self.buffer

    def can_open(self, sealer: str, key_id: str) -> bool:
        return sealer == self.name


@pytest.mark.parametrize("sealer", ["plaintext", "aes-gcm", "own-buffer"])
def test_a_loaded_state_is_its_own_bytes_and_stays_isolated(sealer: str) -> None:
    # issue 15.4 kept the state as a view of the opened body; issue 33 measured it (0.7 % of a 64 KiB
    # load whose state() is decoded) and dropped it: the state is cut out as bytes of its own, so a
    # sealer reusing its buffer, a later save, or the caller's changes never reach a loaded envelope
    import copy
    import pickle

    own = _OwnBuffer()
    chosen: berth.Sealer = own if sealer == "own-buffer" else kat.sealers()[sealer]  # type: ignore[assignment]
    store = berth.Store(MemoryBackend(), identity="t", sealer=chosen)
    state = {"messages": [{"text": "x" * 70_000}], "n": None}
    store.save("k", berth.Envelope(provider_state=state, run_id="r"))
    parked = store.load("k")
    assert parked is not None
    env = parked.envelope
    raw = env.provider_state
    assert type(raw) is bytes and raw == berth.Envelope(provider_state=state).provider_state
    decoded = env.state()
    assert decoded == state
    decoded["messages"].clear()  # what state() returned is the caller's: the envelope is unchanged
    if sealer == "own-buffer":
        own.buffer[:] = b"\0" * len(own.buffer)  # the sealer reusing its buffer changes nothing loaded
    store.save("k", berth.Envelope(provider_state={"other": 1}, run_id="r"))  # nor does the store
    assert env.state() == state and env.provider_state is raw
    again = store.load("k")
    assert again is not None
    first = store.load("k")
    assert first is not None and first.envelope == again.envelope
    for twin in (copy.copy(env), copy.deepcopy(env), pickle.loads(pickle.dumps(env)), env.replace(turn=1)):
        assert type(twin.provider_state) is bytes and twin.provider_state == raw and twin.state() == state
    with pytest.raises(AttributeError):
        env.provider_state = b"{}"  # type: ignore[misc]  # still frozen


def _distinct_envelope() -> berth.Envelope:
    """An envelope whose every field holds a value no other field holds (a swap of two is seen)."""
    return berth.Envelope(
        version=1,
        provider="the-provider",
        model="the-model",
        config_digest="sha256:" + "d" * 64,
        run_id="the-run",
        provider_state={"the": "state"},
        loop_state={"the": "loop"},
        pending_calls=[berth.PendingCall("call-1", "tool-a", {"a": 1}), berth.PendingCall("call-2", "tool-b", [2])],
        turn=7,
        remaining_turns=11,
        reason="the-reason",
        trace_id="the-trace",
        deadline=datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        created_at=datetime(2030, 6, 7, 8, 9, 10, tzinfo=timezone.utc),
        labels={"label": "value"},
    )


def _fields(env: berth.Envelope) -> dict[str, object]:
    return {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}


def _round_trip(encode_prefix: Any, decode_body: Any, env: berth.Envelope) -> berth.Envelope:
    prefix = encode_prefix(env, env.created_at)
    assert json.loads(prefix + env.provider_state + b"}")["provider_state"] == {"the": "state"}
    decoded: berth.Envelope = decode_body(prefix, env.provider_state)
    return decoded


def test_every_envelope_field_round_trips_through_the_body_by_name() -> None:
    env = _distinct_envelope()
    assert len(set(map(repr, _fields(env).values()))) == len(dataclasses.fields(env)), "two fields share a value"
    store = berth.Store(MemoryBackend(), identity=kat.IDENTITY, sealer=kat.sealers()["aes-gcm"])
    store.save(kat.KEY, env)
    parked = store.load(kat.KEY)
    assert parked is not None and _fields(parked.envelope) == _fields(env)
    assert _fields(_round_trip(_codec._encode_prefix, _codec._decode_body, env)) == _fields(env)


def test_a_reordered_body_declaration_changes_the_bytes_never_the_fields() -> None:
    """The body's members are declared once (`_WireMeta`); the codec is built from their names, so a
    declaration in another order writes the members in that order and still fills every field right."""
    env = _distinct_envelope()
    members = [(f.name, f.type) for f in msgspec.structs.fields(_codec._WireMeta)]
    for order in (members[::-1], members[1::2] + members[::2]):
        reordered = msgspec.defstruct("_WireMeta", order)
        encode_prefix, decode_body = _codec._body_codec(reordered)
        prefix = encode_prefix(env, env.created_at)
        assert list(json.loads(prefix + b"0}"))[:-1] == [name for name, _ in order]
        assert prefix != _codec._encode_prefix(env, env.created_at)
        assert _fields(_round_trip(encode_prefix, decode_body, env)) == _fields(env)
    with pytest.raises(TypeError, match="not Envelope's fields"):
        _codec._body_codec(msgspec.defstruct("_WireMeta", members[1:]))
    with pytest.raises(TypeError, match="not Envelope's fields"):
        _codec._body_codec(msgspec.defstruct("_WireMeta", [*members, ("extra", str)]))
