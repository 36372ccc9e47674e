"""The contract's cases for one key: save, load, delete, claim (its races) and deadlines (semantics 1-5)."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, ClassVar

import pytest

from berth._errors import Expired, IntegrityError, InvalidKey, TokenMismatch
from berth._sealer import Sealer
from berth._store import Store
from berth._token import Token
from berth.backends import Backend
from berth.testing._fixtures import FakeClock, assert_clean, make_envelope, plant_frame, raw_frame
from berth.testing._recording import RecordingBackend

__all__ = ["LifecycleCases"]


def _claim_worker(
    opener: Callable[[], Backend], identity: str, sealer: Sealer, keys: list[str], start: Any, results: Any
) -> None:
    store = Store(opener(), identity=identity, sealer=sealer)
    won = []
    start.wait()
    for key in keys:
        if store.claim(key) is not None:
            won.append(key)
    results.put(won)
    store.close()


class LifecycleCases:
    """Semantics 1-5 of docs/contract.md; `StoreContract` provides the fixtures and the settings."""

    cross_process: ClassVar[bool]
    process_race_keys: ClassVar[int]
    process_race_workers: ClassVar[int]

    # --- 1. save -----------------------------------------------------------------------

    def test_round_trip_keeps_every_field(self, store: Store, clock: FakeClock) -> None:
        deadline = clock.now + timedelta(days=3)
        env = make_envelope(deadline=deadline, created_at=clock.now - timedelta(minutes=5))
        store.save("org/repo#42", env)
        parked = store.load("org/repo#42")
        assert parked is not None
        assert parked.envelope == env
        assert parked.envelope.provider_state == env.provider_state
        assert parked.envelope.pending_calls[0].input_value() == {"question": "Ship it?"}
        assert parked.envelope.deadline == deadline

    def test_save_stamps_created_at(self, store: Store, clock: FakeClock) -> None:
        store.save("k", make_envelope())
        parked = store.load("k")
        assert parked is not None and parked.envelope.created_at == clock.now

    def test_resave_supersedes_and_invalidates_old_tokens(self, store: Store) -> None:
        store.save("k", make_envelope("run-1"))
        first = store.load("k")
        assert first is not None
        store.save("k", make_envelope("run-2"))
        with pytest.raises(TokenMismatch):
            store.delete("k", first.token)
        second = store.load("k")
        assert second is not None and second.envelope.run_id == "run-2"
        assert second.token != first.token

    def test_resave_of_identical_envelope_still_advances_generation(self, store: Store, clock: FakeClock) -> None:
        env = make_envelope(created_at=clock.now)
        store.save("k", env)
        first = store.load("k")
        assert first is not None
        store.save("k", env)
        with pytest.raises(TokenMismatch):
            store.delete("k", first.token)
        assert store.load("k") is not None

    def test_save_never_raises_token_mismatch(self, make_store: Callable[..., Store]) -> None:
        # Saves race a claimer's load + delete on the same key: a save landing on a key being
        # deleted, or just deleted, still succeeds; only the claimer may see TokenMismatch.
        writer, claimer = make_store(), make_store()
        stop, claims = threading.Event(), [0]

        def claim_loop() -> None:
            while not stop.is_set():
                parked = claimer.load("k")
                if parked is not None:
                    try:
                        claimer.delete("k", parked.token)
                        claims[0] += 1
                    except TokenMismatch:
                        pass  # a save superseded what it loaded: the claimer's loss, never the writer's

        thread = threading.Thread(target=claim_loop)
        thread.start()
        try:
            # Until the claimer has deleted a few times (bounded in time): a short pause per save lets
            # the claimer's thread run, which a tight loop under the GIL may not (memory://).
            give_up = time.monotonic() + 30
            i = 0
            while time.monotonic() < give_up and not (i >= 50 and claims[0] >= 5):
                writer.save("k", make_envelope(f"run-{i}"))  # TokenMismatch here fails the test
                i += 1
                time.sleep(0.0005)
        finally:
            stop.set()
            thread.join()
        assert claims[0] >= 5, "the claimer never deleted between saves: nothing raced"
        writer.save("k", make_envelope("last"))
        parked = writer.load("k")
        assert parked is not None and parked.envelope.run_id == "last"

    def test_save_returns_the_token_of_what_it_parked(self, store: Store) -> None:
        token = store.save("k", make_envelope())
        parked = store.load("k")
        assert parked is not None and parked.token == token and not token.is_zero
        store.delete("k", token)
        assert store.load("k") is None

    def test_save_if_absent_is_first_writer_wins(self, store: Store) -> None:
        first = store.save("k", make_envelope("first"), if_absent=True)
        with pytest.raises(TokenMismatch) as info:
            store.save("k", make_envelope("second"), if_absent=True)
        assert_clean(info.value, "k")
        parked = store.load("k")
        assert parked is not None and parked.envelope.run_id == "first" and parked.token == first
        store.delete("k", first)
        store.save("k", make_envelope("third"), if_absent=True)  # absent again: allowed
        again = store.load("k")
        assert again is not None and again.envelope.run_id == "third"

    def test_save_if_match_is_compare_and_set(self, store: Store) -> None:
        with pytest.raises(TokenMismatch):
            store.save("k", make_envelope("ghost"), if_match=Token(1))
        assert store.load("k") is None, "a failed if_match save must write nothing"
        one = store.save("k", make_envelope("one"))
        two = store.save("k", make_envelope("two"), if_match=one)
        assert two != one
        with pytest.raises(TokenMismatch) as info:
            store.save("k", make_envelope("stale"), if_match=one)
        assert_clean(info.value, "k")
        parked = store.load("k")
        assert parked is not None and parked.envelope.run_id == "two" and parked.token == two
        three = store.save("k", make_envelope("three"), if_match=parked.token)
        with pytest.raises(TokenMismatch):
            store.delete("k", two)
        store.delete("k", three)

    def test_impossible_save_conditions_never_reach_the_backend(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        token = store.save("k", make_envelope("kept"))
        recorder.calls.clear()
        for kwargs in ({"if_match": Token.ZERO}, {"if_match": token, "if_absent": True}):
            with pytest.raises(TokenMismatch) as info:
                store.save("k", make_envelope("never"), **kwargs)
            assert_clean(info.value, "k")
        assert recorder.calls == []
        parked = store.load("k")
        assert parked is not None and parked.envelope.run_id == "kept"

    def test_save_if_absent_race_has_one_winner(self, make_store: Callable[..., Store]) -> None:
        stores = [make_store() for _ in range(4)]
        keys = [f"first/{i}" for i in range(20)]
        barrier = threading.Barrier(len(stores))

        def worker(pair: tuple[int, Store]) -> list[str]:
            i, s = pair
            barrier.wait()
            won = []
            for key in keys:
                try:
                    s.save(key, make_envelope(f"writer-{i}"), if_absent=True)
                except TokenMismatch:
                    continue
                won.append(key)
            return won

        with ThreadPoolExecutor(len(stores)) as pool:
            won = [k for ks in pool.map(worker, enumerate(stores)) for k in ks]
        assert sorted(won) == sorted(keys), "every key must be created exactly once"

    # --- 2. load -----------------------------------------------------------------------

    def test_load_of_nothing_is_none(self, store: Store) -> None:
        assert store.load("never/parked") is None

    def test_token_is_never_zero(self, store: Store) -> None:
        for i in range(3):
            store.save(f"k{i}", make_envelope())
            parked = store.load(f"k{i}")
            assert parked is not None and not parked.token.is_zero and parked.token != Token.ZERO

    def test_loaded_envelope_is_isolated(self, store: Store) -> None:
        state = bytearray(b'{"messages": ["original"]}')
        env = make_envelope(provider_state=state)
        state[14:22] = b"CHANGED!"  # the caller edits its buffer after building the envelope
        store.save("k", env)
        state[14:22] = b"changed2"  # ... and after saving it
        a, b = store.load("k"), store.load("k")
        assert a is not None and b is not None
        assert a.envelope.state() == {"messages": ["original"]}
        assert a.envelope is not b.envelope and a.envelope == b.envelope
        with pytest.raises((TypeError, AttributeError)):
            a.envelope.labels["repo"] = "other"  # type: ignore[index]
        with pytest.raises((TypeError, AttributeError)):
            a.envelope.run_id = "other"  # type: ignore[misc]
        again = store.load("k")
        assert again is not None and again.envelope.labels["repo"] == "org/repo"

    def test_load_many_keeps_order_and_gaps(self, store: Store) -> None:
        for key in ("a", "b/1", "ünï/ключ"):
            store.save(key, make_envelope(key))
        keys = ["b/1", "missing", "a", "ünï/ключ", "a"]
        got = store.load_many(keys)
        assert [p.envelope.run_id if p else None for p in got] == ["b/1", None, "a", "ünï/ключ", "a"]
        single = store.load("a")
        assert got[2] is not None and single is not None and got[2].token == single.token
        assert store.load_many([]) == []

    def test_load_many_refuses_bad_keys_before_any_io(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        with pytest.raises(InvalidKey):
            store.load_many(["good", "../bad"])
        with pytest.raises(InvalidKey):
            store.load_many("one-key-not-a-list")
        assert recorder.calls == []

    def test_load_many_fails_closed_on_expiry_and_tampering(self, store: Store, clock: FakeClock) -> None:
        store.save("live", make_envelope())
        store.save("old", make_envelope(deadline=clock.now + timedelta(seconds=1)))
        clock.advance(timedelta(seconds=2))
        with pytest.raises(Expired) as info:
            store.load_many(["live", "old"])
        assert info.value.key == "old" and info.value.token is not None
        assert [p is not None for p in store.load_many(["live", "old"], allow_expired=True)] == [True, True]
        plant_frame(store, "moved", raw_frame(store, "live"))
        with pytest.raises(IntegrityError):
            store.load_many(["live", "moved"])

    # --- 3. delete ---------------------------------------------------------------------

    def test_delete_with_current_token_removes(self, store: Store) -> None:
        store.save("k", make_envelope())
        parked = store.load("k")
        assert parked is not None
        store.delete("k", parked.token)
        assert store.load("k") is None

    def test_delete_with_stale_token_mismatches(self, store: Store) -> None:
        store.save("k", make_envelope())
        parked = store.load("k")
        assert parked is not None
        store.delete("k", parked.token)
        with pytest.raises(TokenMismatch) as info:
            store.delete("k", parked.token)
        assert_clean(info.value, "k")

    def test_delete_of_absent_key_mismatches(self, store: Store) -> None:
        with pytest.raises(TokenMismatch):
            store.delete("never", Token(1))
        with pytest.raises(TokenMismatch):
            store.delete("never", Token("etag"))

    def test_zero_token_never_matches_and_never_reaches_the_backend(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        store.save("k", make_envelope())
        recorder.calls.clear()
        with pytest.raises(TokenMismatch) as info:
            store.delete("k", Token.ZERO)
        assert recorder.calls == []
        assert_clean(info.value, "k")
        assert store.load("k") is not None

    # --- 4. claim ----------------------------------------------------------------------

    def test_claim_once(self, store: Store) -> None:
        env = make_envelope()
        store.save("k", env)
        assert store.claim("k") == env.replace(created_at=store.now())
        assert store.claim("k") is None
        assert store.load("k") is None

    def test_claim_of_nothing_is_none(self, store: Store) -> None:
        assert store.claim("nothing") is None

    def test_claim_race_between_threads(self, make_store: Callable[..., Store]) -> None:
        stores = [make_store() for _ in range(4)]
        keys = [f"race/{i}" for i in range(40)]
        for key in keys:
            stores[0].save(key, make_envelope(key))
        barrier = threading.Barrier(len(stores))

        def worker(s: Store) -> list[str]:
            barrier.wait()
            return [k for k in keys if s.claim(k) is not None]

        with ThreadPoolExecutor(len(stores)) as pool:
            won = [k for ks in pool.map(worker, stores) for k in ks]
        assert sorted(won) == sorted(keys), "every key must be won exactly once"

    def _race_worker(
        self, backend_opener: Callable[[], Backend], request: pytest.FixtureRequest
    ) -> tuple[Callable[[], Any], Callable[..., None]]:
        """What a racing worker opens and runs (the async contract races through the async API)."""
        return backend_opener, _claim_worker

    def test_claim_race_between_processes(
        self, store: Store, backend_opener: Callable[[], Backend], sealer: Sealer, request: pytest.FixtureRequest
    ) -> None:
        # A backend that cannot be reached from another process races in threads instead,
        # each with its own handle from backend_opener.
        keys = [f"prace/{i}" for i in range(self.process_race_keys)]
        for key in keys:
            store.save(key, make_envelope(key))
        ctx: Any = multiprocessing.get_context("spawn")
        start, results = (ctx.Event(), ctx.Queue()) if self.cross_process else (threading.Event(), queue.Queue())
        workers: list[Any] = []
        opener, target = self._race_worker(backend_opener, request)
        for i in range(self.process_race_workers):
            args = (opener, store.identity, sealer, list(keys) if i % 2 else keys[::-1], start, results)
            worker_cls = ctx.Process if self.cross_process else threading.Thread
            workers.append(worker_cls(target=target, args=args))
        for w in workers:
            w.start()
        start.set()
        won = [k for _ in workers for k in results.get(timeout=300)]
        for w in workers:
            w.join(timeout=60)
            assert getattr(w, "exitcode", 0) == 0
        assert len(won) == len(keys), f"{len(won) - len(keys)} double claims or lost keys"
        assert sorted(won) == sorted(keys)
        assert list(store.list("prace/")) == []

    # --- 5. deadlines ------------------------------------------------------------------

    def test_deadline_fails_closed(self, store: Store, clock: FakeClock) -> None:
        deadline = clock.now + timedelta(hours=1)
        store.save("k", make_envelope(deadline=deadline))
        clock.advance(timedelta(hours=1))
        assert store.load("k") is not None, "at the deadline exactly, not yet expired"
        clock.advance(timedelta(microseconds=1))
        with pytest.raises(Expired) as info:
            store.load("k")
        exc = info.value
        assert exc.key == "k" and exc.deadline == deadline and exc.token is not None and not exc.token.is_zero
        assert_clean(exc, "k")
        inspected = store.load("k", allow_expired=True)
        assert inspected is not None and inspected.token == exc.token
        store.delete("k", exc.token)
        assert store.load("k", allow_expired=True) is None

    def test_claim_of_expired_removes_and_raises(self, store: Store, clock: FakeClock) -> None:
        store.save("k", make_envelope(deadline=clock.now + timedelta(seconds=1)))
        clock.advance(timedelta(seconds=2))
        with pytest.raises(Expired):
            store.claim("k")
        assert store.load("k", allow_expired=True) is None
        assert store.claim("k") is None

    def test_past_deadline_at_save_is_parked_but_never_resumed(self, store: Store, clock: FakeClock) -> None:
        store.save("k", make_envelope(deadline=clock.now - timedelta(seconds=1)))
        with pytest.raises(Expired):
            store.claim("k")
