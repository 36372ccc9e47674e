"""The contract's cases over many frames: list, load and delete under a prefix, sweep, reseal (semantics 6-8)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from berth._aesgcm import AesGcmSealer, Keyring
from berth._errors import Expired, FormatError, IntegrityError, InvalidKey
from berth._plaintext import PlaintextSealer
from berth._sealer import Sealer
from berth._store import Store
from berth.backends import Backend
from berth.testing._fixtures import FakeClock, assert_clean, make_envelope, plant_frame, raw_frame
from berth.testing._recording import RecordingBackend

__all__ = ["ListingCases"]


class ListingCases:
    """Semantics 6-8 of docs/contract.md; `StoreContract` provides the fixtures."""

    # --- 6. list -----------------------------------------------------------------------

    def test_list_streams_headers(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], clock: FakeClock
    ) -> None:
        store = make_store()
        deadline = clock.now + timedelta(days=1)
        store.save("org/a#1", make_envelope("r1", deadline=deadline))
        store.save("org/a#2", make_envelope("r2"))
        store.save("other/b", make_envelope("r3"))
        make_store("someone-else").save("org/a#3", make_envelope("r4"))
        listing = store.list()
        assert iter(listing) is listing, "list must stream (an iterator), not build a list"
        items = {item.key: item for item in listing}
        assert set(items) == {"org/a#1", "org/a#2", "other/b"}
        one = items["org/a#1"]
        assert (one.run_id, one.deadline, one.created_at) == ("r1", deadline, clock.now)
        assert dict(one.labels) == {"repo": "org/repo", "pr": "42"}
        assert one.sealed_by == f"{store.sealer.name}:{store.sealer.key_id}"
        assert one.size == len(raw_frame(store, "org/a#1"))
        assert {i.key for i in store.list("org/")} == {"org/a#1", "org/a#2"}
        assert {i.key for i in store.list("org/a#2")} == {"org/a#2"}
        assert list(store.list("nothing/")) == []

    def test_list_needs_no_keys(self, make_store: Callable[..., Store]) -> None:
        sealed = make_store()
        sealed.save("k", make_envelope())
        stranger = make_store(sealer=AesGcmSealer(Keyring.generate()))
        assert [i.key for i in stranger.list()] == ["k"]

    def test_list_many(self, store: Store) -> None:
        # more than one page (or batch) of any paging backend, for listing, load_many and delete_prefix
        keys = [f"many/{i:04d}" for i in range(600)]
        for key in keys:
            store.save(key, make_envelope(key))
        store.save("many0", make_envelope())
        assert [i.key for i in store.list("many/")] == keys
        assert [i.key for i in store.list("many/", reverse=True)] == keys[::-1]
        assert [i.key for i in store.list("many/", limit=550, reverse=True)] == keys[::-1][:550]
        assert [i.key for i in store.list("many/", limit=501)] == keys[:501]
        asked = [*keys[::-7], "many/missing"]
        assert [p.envelope.run_id if p else None for p in store.load_many(asked)] == [*keys[::-7], None]
        assert [p.envelope.run_id for _, p in store.load_prefix("many/", limit=130, reverse=True)] == keys[::-1][:130]
        assert [key for key, _ in store.load_prefix("many/")] == keys
        assert store.delete_prefix("many/") == 600
        assert [i.key for i in store.list("many")] == ["many0"]

    def test_list_is_in_bytewise_key_order(self, store: Store) -> None:
        keys = ["b", "a/b", "a", "a/a", "ab", "Z", "é", "ключ", "\U0001f600", "a b", "a-b", "ú", "~"]
        for key in keys:
            store.save(key, make_envelope(key))
        ordered = sorted(keys, key=lambda k: k.encode())
        assert [i.key for i in store.list()] == ordered
        assert [i.key for i in store.list(reverse=True)] == ordered[::-1]
        assert [i.key for i in store.list(limit=3)] == ordered[:3]
        assert [i.key for i in store.list(limit=2, reverse=True)] == ordered[::-1][:2]
        assert [i.key for i in store.list("a", reverse=True)] == ["ab", "a/b", "a/a", "a-b", "a b", "a"]
        assert [i.key for i in store.list("a/", limit=1, reverse=True)] == ["a/b"]
        assert [i.key for i in store.list("zz", limit=1)] == []

    def test_list_latest_under_a_prefix(self, store: Store) -> None:
        # a host whose keys sort by time (a thread's checkpoint ids) finds the latest with one call
        for thread in ("t1", "t10", "t2"):
            for step in range(5):
                store.save(f"{thread}/cp-{step:03d}", make_envelope(f"{thread}-{step}"))
        latest = list(store.list("t1/", limit=1, reverse=True))
        assert [(i.key, i.run_id) for i in latest] == [("t1/cp-004", "t1-4")]
        parked = store.load(latest[0].key)
        assert parked is not None and parked.token == latest[0].token
        assert [i.key for i in store.list("t1/", limit=2)] == ["t1/cp-000", "t1/cp-001"]

    # --- loading under a prefix ------------------------------------------------------------

    def test_load_prefix_opens_in_key_order(self, make_store: Callable[..., Store]) -> None:
        store = make_store()
        for thread in ("t1", "t10", "t2"):
            for step in range(5):
                store.save(f"{thread}/cp-{step:03d}", make_envelope(f"{thread}-{step}"))
        make_store("someone-else").save("t1/cp-009", make_envelope("theirs"))
        rows = store.load_prefix("t1/", limit=2, reverse=True)
        assert iter(rows) is rows, "load_prefix must stream (an iterator), not build a list"
        got = list(rows)
        assert [(key, p.envelope.run_id) for key, p in got] == [("t1/cp-004", "t1-4"), ("t1/cp-003", "t1-3")]
        assert got[0][1].envelope == make_envelope("t1-4", created_at=got[0][1].envelope.created_at)
        single = store.load("t1/cp-004")
        assert single is not None and got[0][1].token == single.token
        assert [key for key, _ in store.load_prefix("t1")] == [f"t1/cp-{i:03d}" for i in range(5)] + [
            f"t10/cp-{i:03d}" for i in range(5)
        ]
        assert [key for key, _ in store.load_prefix(limit=3)] == ["t1/cp-000", "t1/cp-001", "t1/cp-002"]
        assert list(store.load_prefix("nothing/")) == []

    def test_load_prefix_before_starts_below_a_key(self, store: Store) -> None:
        # a page of history before a key: keys that sort before `before`, newest first, across pages
        keys = [f"h/{i:04d}" for i in range(150)]
        for key in keys:
            store.save(key, make_envelope(key))
        store.save("h/0100-w", make_envelope())  # sorts after h/0100: not before it
        store.save("h0", make_envelope())
        page = [(key, p.envelope.run_id) for key, p in store.load_prefix("h/", limit=10, reverse=True, before="h/0100")]
        assert page == [(key, key) for key in keys[99:89:-1]]
        assert [key for key, _ in store.load_prefix("h/", reverse=True, before="h/0100")] == keys[:100][::-1]
        assert [key for key, _ in store.load_prefix("h/", before="h/0003")] == keys[:3]
        assert [key for key, _ in store.load_prefix("h/", limit=2, reverse=True, before="i")] == ["h/0149", "h/0148"]
        assert list(store.load_prefix("h/", reverse=True, before="h/")) == []
        with pytest.raises(InvalidKey):
            store.load_prefix("h/", before="/h")

    def test_load_prefix_fails_closed_on_expiry_and_tampering(self, store: Store, clock: FakeClock) -> None:
        store.save("p/a", make_envelope())
        store.save("p/b", make_envelope(deadline=clock.now + timedelta(seconds=1)))
        store.save("p/c", make_envelope())
        clock.advance(timedelta(seconds=2))
        assert [key for key, _ in store.load_prefix("p/", limit=1, reverse=True)] == ["p/c"]
        with pytest.raises(Expired) as info:
            list(store.load_prefix("p/"))
        assert info.value.key == "p/b" and info.value.token is not None
        assert_clean(info.value, "p/b")
        assert [key for key, _ in store.load_prefix("p/", allow_expired=True)] == ["p/a", "p/b", "p/c"]
        plant_frame(store, "p/d", raw_frame(store, "p/a"))  # a frame moved to another key
        with pytest.raises(IntegrityError) as moved:
            list(store.load_prefix("p/", reverse=True))
        assert moved.value.key == "p/d"
        assert_clean(moved.value, "p/d")
        flipped = bytearray(raw_frame(store, "p/c"))
        flipped[-1] ^= 1
        plant_frame(store, "p/d", bytes(flipped))
        with pytest.raises(IntegrityError):
            list(store.load_prefix("p/", limit=1, reverse=True))
        plant_frame(store, "p/d", b"not a frame")
        with pytest.raises(FormatError):
            list(store.load_prefix("p/", limit=1, reverse=True))

    def test_load_prefix_reads_a_large_frame_whole(self, store: Store) -> None:
        # past 1 MiB a backend may read a frame in pieces (PostgreSQL does): the ordered load too
        store.save("big/a", make_envelope("small"))
        store.save("big/b", make_envelope("large", provider_state={"blob": "x" * 1_500_000}))
        got = [(key, p.envelope.run_id, len(p.envelope.provider_state)) for key, p in store.load_prefix("big/")]
        assert got[0][:2] == ("big/a", "small") and got[1][:2] == ("big/b", "large")
        assert got[1][2] > 1_500_000

    def test_load_prefix_refuses_a_plaintext_frame(self, make_store: Callable[..., Store]) -> None:
        sealed = make_store()
        sealed.save("p/a", make_envelope())
        make_store(sealer=PlaintextSealer()).save("p/b", make_envelope())  # planted in the clear
        with pytest.raises(IntegrityError) as info:
            list(sealed.load_prefix("p/"))
        assert info.value.key == "p/b"

    @pytest.mark.parametrize("limit", [0, -1, 1.5, True, "3"])
    def test_list_refuses_a_bad_limit_before_any_io(
        self, limit: Any, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        for listing in (store.list, store.load_prefix):  # the ordered load takes list's arguments
            with pytest.raises(ValueError):
                listing(limit=limit)
            with pytest.raises(InvalidKey):
                listing("/abs")
            with pytest.raises(InvalidKey):
                listing("new\nline/")
        assert recorder.calls == []

    # --- deleting under a prefix ---------------------------------------------------------

    def test_delete_prefix_removes_only_under_the_prefix(self, make_store: Callable[..., Store]) -> None:
        store, other = make_store(), make_store("other-identity")
        for key in ("t1/a", "t1/b/c", "t10/a", "t1", "u/t1/a"):
            store.save(key, make_envelope(key))
        other.save("t1/a", make_envelope("theirs"))
        assert store.delete_prefix("t1/") == 2
        assert [i.key for i in store.list()] == ["t1", "t10/a", "u/t1/a"]
        assert other.load("t1/a") is not None
        assert store.delete_prefix("t1/") == 0
        assert store.delete_prefix("") == 3
        assert list(store.list()) == [] and other.load("t1/a") is not None

    def test_save_racing_a_delete_prefix_survives(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        writer = make_store()
        writer.save("t/a", make_envelope("old"))
        recorder = RecordingBackend(backend_opener(), before_delete=lambda _n: writer.save("t/a", make_envelope("new")))
        deleter = make_store(backend=recorder)
        assert deleter.delete_prefix("t/") == 0
        parked = writer.load("t/a")
        assert parked is not None and parked.envelope.run_id == "new"

    def test_delete_prefix_removes_frames_that_do_not_open(self, store: Store) -> None:
        store.save("t/good", make_envelope())
        plant_frame(store, "t/garbage", b"not a frame")
        assert store.delete_prefix("t/") == 2
        assert store.load("t/garbage") is None

    def test_delete_prefix_refuses_a_bad_prefix_before_any_io(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        for bad in ("/abs", "nul\x00", "tab\t"):
            with pytest.raises(InvalidKey):
                store.delete_prefix(bad)
        assert recorder.calls == []

    # --- 7. sweep ----------------------------------------------------------------------

    def test_sweep_removes_only_the_expired(self, store: Store, clock: FakeClock) -> None:
        store.save("old", make_envelope(deadline=clock.now + timedelta(minutes=1)))
        store.save("live", make_envelope(deadline=clock.now + timedelta(days=1)))
        store.save("forever", make_envelope())
        clock.advance(timedelta(minutes=2))
        assert store.sweep() == 1
        assert store.load("old", allow_expired=True) is None
        assert store.load("live") is not None and store.load("forever") is not None
        assert store.sweep(now=clock.now + timedelta(days=2)) == 1
        assert store.load("forever") is not None

    def test_sweep_needs_no_keys(self, make_store: Callable[..., Store], clock: FakeClock) -> None:
        make_store().save("k", make_envelope(deadline=clock.now - timedelta(seconds=1)))
        keyless = make_store(sealer=PlaintextSealer())
        assert keyless.sweep() == 1

    def test_save_racing_a_sweep_survives(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], clock: FakeClock
    ) -> None:
        # Deterministic: the re-save lands between the sweep's read and its delete.
        writer = make_store()
        writer.save("k", make_envelope("old", deadline=clock.now - timedelta(seconds=1)))
        recorder = RecordingBackend(
            backend_opener(), before_delete=lambda _name: writer.save("k", make_envelope("new"))
        )
        sweeper = make_store(backend=recorder)
        assert sweeper.sweep() == 0
        parked = writer.load("k")
        assert parked is not None and parked.envelope.run_id == "new"

    def test_save_between_a_sweeps_listing_and_its_delete_survives(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], clock: FakeClock
    ) -> None:
        # Deterministic: the re-save lands once the sweep has listed the expired frame, before the
        # sweep reads anything else: only a delete conditional on the listed token spares it.
        writer = make_store()
        writer.save("k", make_envelope("old", deadline=clock.now - timedelta(seconds=1)))
        recorder = RecordingBackend(
            backend_opener(), after_listing=lambda _prefix: writer.save("k", make_envelope("new"))
        )
        sweeper = make_store(backend=recorder)
        assert sweeper.sweep() == 0
        parked = writer.load("k")
        assert parked is not None and parked.envelope.run_id == "new"
        assert sweeper.sweep() == 0

    def test_save_racing_a_sweep_in_threads(self, make_store: Callable[..., Store], clock: FakeClock) -> None:
        writer, sweeper = make_store(), make_store()
        for round_ in range(20):
            writer.save("k", make_envelope("old", deadline=clock.now - timedelta(seconds=1)))
            t = threading.Thread(target=sweeper.sweep)
            t.start()
            writer.save("k", make_envelope(f"new-{round_}"))
            t.join()
            parked = writer.load("k")
            assert parked is not None and parked.envelope.run_id == f"new-{round_}"

    # --- 8. reseal ---------------------------------------------------------------------

    def test_reseal_moves_plaintext_to_the_sealer(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], sealer: Sealer
    ) -> None:
        if isinstance(sealer, PlaintextSealer):
            pytest.skip("the contract runs under the plaintext sealer")
        backend = backend_opener()
        legacy = make_store(backend=backend, sealer=PlaintextSealer())
        env = make_envelope()
        legacy.save("k", env)
        with pytest.raises(IntegrityError):
            make_store(backend=backend_opener()).load("k")
        migrating = make_store(backend=backend_opener(), accept_plaintext=True)
        report = migrating.reseal()
        assert report == 1
        assert migrating.reseal() == 0
        strict = make_store(backend=backend_opener())
        parked = strict.load("k")
        assert parked is not None and parked.envelope.provider_state == env.provider_state
        assert next(strict.list()).sealed_by == f"{sealer.name}:{sealer.key_id}"

    def test_reseal_loses_to_a_concurrent_save(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend], sealer: Sealer
    ) -> None:
        if isinstance(sealer, PlaintextSealer):
            pytest.skip("the contract runs under the plaintext sealer")
        legacy = make_store(sealer=PlaintextSealer())
        legacy.save("k", make_envelope("old"))
        recorder = RecordingBackend(
            backend_opener(), before_conditional_put=lambda _n: legacy.save("k", make_envelope("new"))
        )
        migrating = make_store(backend=recorder, accept_plaintext=True)
        report = migrating.reseal()
        assert report == 0 and report.skipped == 1
        parked = make_store(accept_plaintext=True).load("k")
        assert parked is not None and parked.envelope.run_id == "new"
