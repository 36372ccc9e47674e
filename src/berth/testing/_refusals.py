"""The contract's refusals: bad keys, identities and envelopes, tampered, moved and downgraded frames (semantic 9).

Each refusal changes nothing parked and, where the input alone is wrong, does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import ClassVar

import pytest

from berth._aesgcm import AesGcmSealer, Keyring
from berth._codec import PREFIX_SIZE
from berth._errors import (
    BerthError,
    EnvelopeTooLarge,
    Expired,
    FormatError,
    IntegrityError,
    InvalidEnvelope,
    InvalidKey,
)
from berth._plaintext import PlaintextSealer
from berth._sealer import Sealer
from berth._store import Store
from berth._token import Token
from berth.backends import Backend
from berth.testing._fixtures import (
    BAD_IDENTITIES,
    BAD_KEYS,
    GOOD_KEYS,
    SECRET,
    FakeClock,
    assert_clean,
    make_envelope,
    plant_frame,
    raw_frame,
)
from berth.testing._recording import EventBackend, RecordingBackend

__all__ = ["RefusalCases"]


class RefusalCases:
    """Semantic 9 and the integrity cases of docs/contract.md; `StoreContract` provides the fixtures."""

    tamper_stride: ClassVar[int]

    # --- 9. keys and identities ----------------------------------------------------------

    @pytest.mark.parametrize("key", BAD_KEYS, ids=lambda k: repr(k)[:24])
    def test_bad_key_is_refused_before_any_io(
        self, key: str, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        for call in (
            lambda: store.save(key, make_envelope()),
            lambda: store.load(key),
            lambda: store.delete(key, Token(1)),
            lambda: store.claim(key),
        ):
            with pytest.raises(InvalidKey) as info:
                call()
            assert isinstance(info.value, ValueError)
        assert recorder.calls == []

    @pytest.mark.parametrize("key", GOOD_KEYS, ids=lambda k: repr(k)[:24])
    def test_good_keys_round_trip(self, key: str, store: Store) -> None:
        store.save(key, make_envelope(key))
        parked = store.load(key)
        assert parked is not None and parked.envelope.run_id == key
        assert [i.key for i in store.list()] == [key]
        assert store.claim(key) is not None

    def test_a_key_and_its_children_coexist(self, store: Store) -> None:
        for key in ("a", "a/b", "a/b/c", "ab"):
            store.save(key, make_envelope(key))
        for key in ("a", "a/b", "a/b/c", "ab"):
            parked = store.load(key)
            assert parked is not None and parked.envelope.run_id == key

    @pytest.mark.parametrize("identity", BAD_IDENTITIES, ids=lambda k: repr(k)[:24])
    def test_bad_identity_is_refused(
        self, identity: str, backend_opener: Callable[[], Backend], sealer: Sealer
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        with pytest.raises(InvalidKey):
            Store(recorder, identity=identity, sealer=sealer)
        assert recorder.calls == []

    def test_identities_are_separate_namespaces(self, make_store: Callable[..., Store]) -> None:
        a, b, ab = make_store("a"), make_store("b"), make_store("a.b")
        a.save("k", make_envelope("in-a"))
        assert b.load("k") is None and ab.load("k") is None
        assert list(b.list()) == [] and b.claim("k") is None
        parked = a.load("k")
        assert parked is not None and parked.envelope.run_id == "in-a"

    # --- bad input changes nothing parked --------------------------------------------------

    def test_bad_envelopes_are_refused_and_change_nothing(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder, max_envelope_bytes=4096)
        store.save("k", make_envelope("kept"))
        before = raw_frame(store, "k")
        recorder.calls.clear()
        with pytest.raises(InvalidEnvelope):
            store.save("k", make_envelope(version=2))
        with pytest.raises(InvalidEnvelope):
            store.save("k", {"not": "an envelope"})  # type: ignore[arg-type]
        with pytest.raises(EnvelopeTooLarge) as info:
            store.save("k", make_envelope(provider_state={"blob": "x" * 5000}))
        assert_clean(info.value, "k")
        assert recorder.calls == []
        assert raw_frame(store, "k") == before

    def test_envelope_construction_refuses_bad_values(self) -> None:
        with pytest.raises(InvalidEnvelope):
            make_envelope(deadline=datetime(2030, 1, 1))
        with pytest.raises(InvalidEnvelope):
            make_envelope(provider_state=b"{not json")
        with pytest.raises(InvalidEnvelope):
            make_envelope(provider_state={"x": object()})
        with pytest.raises(InvalidEnvelope):
            make_envelope(labels={"a": 1})

    # --- tampering, moving, downgrading -------------------------------------------------

    def test_every_changed_byte_fails_to_open(self, store: Store) -> None:
        store.save("k", make_envelope(provider_state={"m": SECRET}))
        frame = raw_frame(store, "k")
        step = self.tamper_stride
        positions = sorted(set(range(0, min(len(frame), 400), step)) | set(range(len(frame) - 64, len(frame), step)))
        for pos in positions:
            bad = bytearray(frame)
            bad[pos] ^= 0x01
            plant_frame(store, "k", bytes(bad))
            with pytest.raises((IntegrityError, FormatError)) as info:
                store.load("k")
            assert SECRET not in str(info.value)
        plant_frame(store, "k", frame)
        assert store.load("k") is not None

    def test_small_frames_come_back_as_bytes(self, store: Store) -> None:
        # The seam returns bytes: `b"x" in memoryview(...)` is always False, so a view would make a
        # caller's search of a frame (a leak check, say) silently pass. Views are for 1 MiB and up.
        store.save("k", make_envelope(provider_state={"m": SECRET}))
        found = store.backend.get(f"{store.identity}/k")
        assert found is not None and type(found[0]) is bytes
        if isinstance(store.sealer, PlaintextSealer):
            assert SECRET.encode() in found[0]

    def test_truncated_and_appended_frames_fail(self, store: Store) -> None:
        store.save("k", make_envelope())
        frame = raw_frame(store, "k")
        for bad in (frame[:n] for n in (0, 1, 8, PREFIX_SIZE, PREFIX_SIZE + 5, len(frame) // 2, len(frame) - 1)):
            plant_frame(store, "k", bad)
            with pytest.raises((IntegrityError, FormatError)):
                store.load("k")
        plant_frame(store, "k", frame + b"\x00")
        with pytest.raises((IntegrityError, FormatError)):
            store.load("k")

    def test_frame_copied_to_another_key_fails(self, store: Store) -> None:
        store.save("victim", make_envelope())
        plant_frame(store, "attacker", raw_frame(store, "victim"))
        with pytest.raises(IntegrityError) as info:
            store.load("attacker")
        assert_clean(info.value, "attacker")
        with pytest.raises(IntegrityError):
            store.claim("attacker")
        assert store.load("victim") is not None

    def test_frame_copied_to_another_identity_fails(self, make_store: Callable[..., Store]) -> None:
        a, b = make_store("tenant-a"), make_store("tenant-b")
        a.save("k", make_envelope())
        plant_frame(b, "k", raw_frame(a, "k"))
        with pytest.raises(IntegrityError):
            b.load("k")

    def test_plaintext_frame_in_a_sealed_store_is_refused(
        self, make_store: Callable[..., Store], sealer: Sealer
    ) -> None:
        if isinstance(sealer, PlaintextSealer):
            pytest.skip("the contract runs under the plaintext sealer")
        plain = make_store(sealer=PlaintextSealer())
        plain.save("k", make_envelope())
        sealed = make_store()
        with pytest.raises(IntegrityError) as info:
            sealed.load("k")
        assert_clean(info.value, "k")
        with pytest.raises(IntegrityError):
            sealed.claim("k")
        assert plain.load("k") is not None, "a refused frame is left in place"
        parked = make_store(accept_plaintext=True).load("k")
        assert parked is not None

    def test_sealed_frame_in_a_plaintext_store_names_the_key_needed(
        self, make_store: Callable[..., Store], sealer: Sealer
    ) -> None:
        if isinstance(sealer, PlaintextSealer):
            pytest.skip("the contract runs under the plaintext sealer")
        make_store().save("k", make_envelope())
        with pytest.raises(IntegrityError) as info:
            make_store(sealer=PlaintextSealer()).load("k")
        assert sealer.key_id in str(info.value)

    def test_frame_under_a_key_not_held_is_refused(self, make_store: Callable[..., Store]) -> None:
        make_store().save("k", make_envelope())
        with pytest.raises(IntegrityError):
            make_store(sealer=AesGcmSealer(Keyring.generate())).load("k")

    def test_future_format_is_refused_and_left_untouched(self, store: Store, clock: FakeClock) -> None:
        store.save("k", make_envelope(deadline=clock.now - timedelta(days=1)))
        frame = bytearray(raw_frame(store, "k"))
        frame[8] = 99  # the format version byte after the magic
        plant_frame(store, "k", bytes(frame))
        with pytest.raises(FormatError):
            store.load("k")
        with pytest.raises(FormatError):
            store.claim("k")
        store.sweep(now=clock.now + timedelta(days=30))
        assert raw_frame(store, "k") == bytes(frame)

    def test_garbage_where_a_frame_should_be(self, store: Store) -> None:
        for garbage in (b"", b"{}", b"hello world", bytes(range(256)) * 4):
            plant_frame(store, "k", garbage)
            with pytest.raises(FormatError) as info:
                store.load("k")
            assert isinstance(info.value, BerthError)
        # Listed, flagged, never hidden: an enumerator must not take an older frame for the latest.
        (item,) = store.list()
        assert item.key == "k" and item.error

    # --- integrity at the seams (issue 12) ----------------------------------------------

    def test_one_bad_value_never_stops_list_sweep_or_reseal(self, store: Store, clock: FakeClock) -> None:
        store.save("a", make_envelope("ra", deadline=clock.now - timedelta(seconds=1)))
        plant_frame(store, "b", b"not a frame, something else's value")
        frame = bytearray(raw_frame(store, "a"))
        frame[PREFIX_SIZE + 2] ^= 0xFF  # inside the header JSON: a header that cannot be read
        plant_frame(store, "c", bytes(frame))
        store.save("d", make_envelope("rd", deadline=clock.now - timedelta(seconds=1)))
        items = {i.key: i for i in store.list()}
        assert set(items) == {"a", "b", "c", "d"}
        assert items["a"].error is None and items["d"].error is None
        assert items["b"].error and items["c"].error and items["b"].run_id == "" and items["b"].deadline is None
        assert store.sweep() == 2
        assert {i.key for i in store.list()} == {"b", "c"}, "unreadable frames are left in place"
        store.save("e", make_envelope("re"))
        report = store.reseal()
        assert (int(report), report.failed) == (0, 2)
        assert store.load("e") is not None

    def test_sweep_streams_deleting_as_it_reads(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], clock: FakeClock
    ) -> None:
        events: list[str] = []
        recorder = EventBackend(backend_opener(), events)
        store = make_store(backend=recorder)
        for i in range(40):
            store.save(f"s/{i:02d}", make_envelope(f"r{i}", deadline=clock.now - timedelta(seconds=1)))
        events.clear()
        removed: list[str] = []
        assert store.sweep(on_removed=lambda item: removed.append(item.key)) == 40
        assert sorted(removed) == [f"s/{i:02d}" for i in range(40)]
        first_delete = events.index("delete")
        assert "read" in events[first_delete:], "sweep read every header before deleting (memory grows with work)"

    def test_a_long_header_is_listed_without_reading_the_frame(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], clock: FakeClock
    ) -> None:
        labels = {f"label-{i:02d}": "v" * 40 for i in range(24)}  # a header over 1 KiB
        big = make_envelope(labels=labels, provider_state={"blob": "x" * 200_000})
        events: list[str] = []
        recorder = EventBackend(backend_opener(), events)
        store = make_store(backend=recorder)
        store.save("big", big)
        events.clear()
        (item,) = store.list()
        assert item.error is None and dict(item.labels) == labels and item.size > 200_000
        if type(recorder.inner).head is not Backend.head:  # the default `head` is a `get`, cut
            assert "get" not in events, "listing a long header read the whole frame"

    def test_deadline_passing_during_the_claim_is_never_handed_out(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], clock: FakeClock
    ) -> None:
        def slow_delete(_name: str) -> None:
            clock.advance(timedelta(seconds=2))  # the deadline passes between the check and the commit

        store = make_store(backend=RecordingBackend(backend_opener(), before_delete=slow_delete))
        store.save("k", make_envelope(deadline=clock.now + timedelta(seconds=1)))
        with pytest.raises(Expired) as info:
            store.claim("k")
        assert info.value.key == "k"
        assert store.load("k", allow_expired=True) is None, "removed, as an expired claim is"

    def test_a_header_too_large_is_refused_before_io(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        control = "".join(chr(c) for c in range(1, 32)) * 8
        for env in (
            make_envelope(run_id="r" * 70_000),
            make_envelope(labels={f"{control}{i}"[:256]: control for i in range(64)}),
        ):
            with pytest.raises(InvalidEnvelope) as info:
                store.save("k", env)
            assert_clean(info.value, "k")
        assert recorder.calls == []

    def test_guarantees_are_fixed_at_open(self, make_store: Callable[..., Store]) -> None:
        store = make_store()
        with pytest.raises(AttributeError):
            store.accept_plaintext = True  # type: ignore[misc]
        with pytest.raises(AttributeError):
            store.sealer = PlaintextSealer()  # type: ignore[misc]
        assert store.accept_plaintext is False and not isinstance(store.sealer, PlaintextSealer)
