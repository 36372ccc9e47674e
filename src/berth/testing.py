"""`StoreContract`: the store contract as a pytest suite any backend can run.

Subclass it in a test module and override one fixture::

    import functools, berth.testing
    from myapp.storage import MyBackend

    class TestMyBackend(berth.testing.StoreContract):
        @pytest.fixture
        def backend_opener(self, tmp_path):
            # a picklable zero-argument callable that opens a new handle onto
            # one fresh, empty storage namespace (the same one on every call)
            return functools.partial(MyBackend, str(tmp_path))

Every numbered semantic of docs/contract.md is a test here (and the page names each case), including races between
threads and between processes, expiry under an injected clock, tampering,
frames moved between keys and identities, and downgrades to plaintext. Set
`cross_process = False` for a backend whose handles cannot reach the same
storage from another process (the memory backend): its claim race then runs in
threads. Override `sealer` to run the
contract under another sealer; it must be picklable for the process races.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, TypeVar

try:
    import pytest
except ModuleNotFoundError as exc:  # pragma: no cover - the suite runs under pytest
    if exc.name != "pytest":
        raise
    raise ImportError("berth.testing needs pytest: pip install 'berthing[testing]'") from exc

from berth._aesgcm import AesGcmSealer, Keyring
from berth._aio_store import AsyncStore
from berth._codec import PREFIX_SIZE
from berth._envelope import Envelope, PendingCall
from berth._errors import (
    BerthError,
    EnvelopeTooLarge,
    Expired,
    FormatError,
    IntegrityError,
    InvalidEnvelope,
    InvalidKey,
    TokenMismatch,
)
from berth._plaintext import PlaintextSealer
from berth._sealer import Sealer
from berth._store import Listing, Parked, Store
from berth._token import Token
from berth.backends import Backend, Data, Frame, Head, as_backend
from berth.backends._aio import AsyncBackend, ThreadedBackend

__all__ = ["AsyncStoreContract", "FakeClock", "RecordingBackend", "StoreContract", "make_envelope"]

T = TypeVar("T")

SECRET = "PLAINTEXT-MARKER-7f3a9c"
"""Planted in every contract envelope's state: it must never appear in an error message."""

BAD_KEYS = [
    "",
    "/leading",
    "a//b",
    "trailing/",
    ".",
    "..",
    "a/./b",
    "a/../b",
    "../escape",
    "nul\x00byte",
    "new\nline",
    "tab\tkey",
    "del\x7f",
    "c1\x85control",
    "x" * 1025,
    "é" * 513,
]
GOOD_KEYS = ["org/repo#42", "a", "a/b", "with space", "ünïcødé/ключ", "x" * 1024, "a.b/..c/d..", "é" * 512]
BAD_IDENTITIES = ["", ".", "..", "a/b", "a b", "x" * 129, "tab\t", "ünï"]


class FakeClock:
    """An injectable clock: `store = Store(..., clock=clock)`; move it with `advance`."""

    def __init__(self, start: datetime | None = None):
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self.now += delta
            return self.now


class RecordingBackend(Backend):
    """Wraps a backend and records every call: proves that bad input does no I/O."""

    def __init__(
        self,
        inner: Backend,
        before_delete: Callable[[str], object] | None = None,
        before_conditional_put: Callable[[str], object] | None = None,
        after_listing: Callable[[str], object] | None = None,
    ):
        """`before_delete`, `before_conditional_put`: called once, with the name, before the first such
        write. `after_listing`: called once, with the prefix, when `heads` has listed every frame
        under it and before it hands any of them over (a sweep's or a prefix delete's listing)."""
        self.inner = as_backend(inner)
        self.calls: list[str] = []
        self._before_delete = before_delete
        self._before_conditional_put = before_conditional_put
        self._after_listing = after_listing

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        self.calls.append("put")
        if if_match is not None and self._before_conditional_put is not None:
            hook, self._before_conditional_put = self._before_conditional_put, None
            hook(name)
        return self.inner.put(name, data, if_match=if_match, if_absent=if_absent)

    def get(self, name: str) -> tuple[Data, Token] | None:
        self.calls.append("get")
        return self.inner.get(name)

    def delete(self, name: str, token: Token) -> None:
        self.calls.append("delete")
        if self._before_delete is not None:
            hook, self._before_delete = self._before_delete, None
            hook(name)
        self.inner.delete(name, token)

    def scan(self, prefix: str) -> Iterator[str]:
        self.calls.append("scan")
        return self.inner.scan(prefix)

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        self.calls.append("heads")
        if self._after_listing is None:
            return self.inner.heads(prefix, size)
        hook, self._after_listing = self._after_listing, None
        rows = list(self.inner.heads(prefix, size))
        hook(prefix)
        return iter(rows)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        self.calls.append("sorted_heads")
        return self.inner.sorted_heads(prefix, size, limit=limit, reverse=reverse)

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> Iterator[Frame]:
        self.calls.append("sorted_frames")
        bounded = {} if before is None else {"before": before}
        return self.inner.sorted_frames(prefix, limit=limit, reverse=reverse, **bounded)

    def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        self.calls.append("head")
        return self.inner.head(name, size)

    def get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        self.calls.append("get_many")
        return self.inner.get_many(names)

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        self.calls.append("delete_many")
        if self._before_delete is not None and items:
            hook, self._before_delete = self._before_delete, None
            hook(items[0][0])
        return self.inner.delete_many(items)

    def setup(self) -> int | None:
        return self.inner.setup()

    def close(self) -> None:
        self.inner.close()


def make_envelope(run_id: str = "run-1", **changes: Any) -> Envelope:
    """A small, fully populated envelope whose state holds the `SECRET` marker."""
    fields: dict[str, Any] = dict(
        provider="anthropic",
        model="claude-test",
        config_digest="sha256:" + "0" * 64,
        run_id=run_id,
        provider_state={"messages": [{"role": "user", "content": f"customer text {SECRET}"}]},
        loop_state={"step": 3},
        pending_calls=[PendingCall("call-1", "ask_human", {"question": "Ship it?"})],
        turn=3,
        remaining_turns=7,
        reason="awaiting answer",
        trace_id="trace-abc",
        labels={"repo": "org/repo", "pr": "42"},
    )
    fields.update(changes)
    return Envelope(**fields)


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


class StoreContract:
    """The store contract of docs/contract.md; subclass and override `backend_opener`."""

    cross_process: ClassVar[bool] = True
    process_race_keys: ClassVar[int] = 200
    process_race_workers: ClassVar[int] = 4
    tamper_stride: ClassVar[int] = 1
    """Every `tamper_stride`-th byte of a frame's first 400 and last 64 is flipped (1: every one)."""

    # --- fixtures a subclass provides or may override ---------------------------------

    @pytest.fixture
    def backend_opener(self) -> Callable[[], Backend]:
        """Override: a picklable zero-arg callable opening a fresh, empty namespace."""
        raise NotImplementedError("override the backend_opener fixture to run StoreContract")

    @pytest.fixture
    def sealer(self) -> Sealer:
        """The sealer the contract runs under (AES-256-GCM by default)."""
        return AesGcmSealer(Keyring.generate())

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def make_store(
        self, backend_opener: Callable[[], Backend], sealer: Sealer, clock: FakeClock
    ) -> Iterator[Callable[..., Store]]:
        opened: list[Store] = []

        def make(identity: str = "contract", **kw: Any) -> Store:
            kw.setdefault("sealer", sealer)
            kw.setdefault("clock", clock)
            backend = kw.pop("backend", None) or backend_opener()
            store = Store(backend, identity=identity, **kw)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()

    @pytest.fixture
    def store(self, make_store: Callable[..., Store]) -> Store:
        return make_store()

    # --- helpers ------------------------------------------------------------------------

    @staticmethod
    def _raw(store: Store, key: str) -> bytes:
        found = store.backend.get(f"{store.identity}/{key}")
        assert found is not None, f"nothing stored for {key!r}"
        return bytes(found[0])

    @staticmethod
    def _plant(store: Store, key: str, data: bytes) -> None:
        store.backend.put(f"{store.identity}/{key}", data)

    @staticmethod
    def _assert_clean(exc: BaseException, key: str) -> None:
        text = str(exc)
        assert SECRET not in text, "an error message leaked plaintext state"
        assert key in text or repr(key) in text, f"error message does not name the key: {text}"

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
        self._assert_clean(info.value, "k")
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
        self._assert_clean(info.value, "k")
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
            self._assert_clean(info.value, "k")
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
        self._plant(store, "moved", self._raw(store, "live"))
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
        self._assert_clean(info.value, "k")

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
        self._assert_clean(info.value, "k")
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
        self._assert_clean(exc, "k")
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
        assert one.size == len(self._raw(store, "org/a#1"))
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
        self._assert_clean(info.value, "p/b")
        assert [key for key, _ in store.load_prefix("p/", allow_expired=True)] == ["p/a", "p/b", "p/c"]
        self._plant(store, "p/d", self._raw(store, "p/a"))  # a frame moved to another key
        with pytest.raises(IntegrityError) as moved:
            list(store.load_prefix("p/", reverse=True))
        assert moved.value.key == "p/d"
        self._assert_clean(moved.value, "p/d")
        flipped = bytearray(self._raw(store, "p/c"))
        flipped[-1] ^= 1
        self._plant(store, "p/d", bytes(flipped))
        with pytest.raises(IntegrityError):
            list(store.load_prefix("p/", limit=1, reverse=True))
        self._plant(store, "p/d", b"not a frame")
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
        self._plant(store, "t/garbage", b"not a frame")
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
        before = self._raw(store, "k")
        recorder.calls.clear()
        with pytest.raises(InvalidEnvelope):
            store.save("k", make_envelope(version=2))
        with pytest.raises(InvalidEnvelope):
            store.save("k", {"not": "an envelope"})  # type: ignore[arg-type]
        with pytest.raises(EnvelopeTooLarge) as info:
            store.save("k", make_envelope(provider_state={"blob": "x" * 5000}))
        self._assert_clean(info.value, "k")
        assert recorder.calls == []
        assert self._raw(store, "k") == before

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
        frame = self._raw(store, "k")
        step = self.tamper_stride
        positions = sorted(set(range(0, min(len(frame), 400), step)) | set(range(len(frame) - 64, len(frame), step)))
        for pos in positions:
            bad = bytearray(frame)
            bad[pos] ^= 0x01
            self._plant(store, "k", bytes(bad))
            with pytest.raises((IntegrityError, FormatError)) as info:
                store.load("k")
            assert SECRET not in str(info.value)
        self._plant(store, "k", frame)
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
        frame = self._raw(store, "k")
        for bad in (frame[:n] for n in (0, 1, 8, PREFIX_SIZE, PREFIX_SIZE + 5, len(frame) // 2, len(frame) - 1)):
            self._plant(store, "k", bad)
            with pytest.raises((IntegrityError, FormatError)):
                store.load("k")
        self._plant(store, "k", frame + b"\x00")
        with pytest.raises((IntegrityError, FormatError)):
            store.load("k")

    def test_frame_copied_to_another_key_fails(self, store: Store) -> None:
        store.save("victim", make_envelope())
        self._plant(store, "attacker", self._raw(store, "victim"))
        with pytest.raises(IntegrityError) as info:
            store.load("attacker")
        self._assert_clean(info.value, "attacker")
        with pytest.raises(IntegrityError):
            store.claim("attacker")
        assert store.load("victim") is not None

    def test_frame_copied_to_another_identity_fails(self, make_store: Callable[..., Store]) -> None:
        a, b = make_store("tenant-a"), make_store("tenant-b")
        a.save("k", make_envelope())
        self._plant(b, "k", self._raw(a, "k"))
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
        self._assert_clean(info.value, "k")
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
        frame = bytearray(self._raw(store, "k"))
        frame[8] = 99  # the format version byte after the magic
        self._plant(store, "k", bytes(frame))
        with pytest.raises(FormatError):
            store.load("k")
        with pytest.raises(FormatError):
            store.claim("k")
        store.sweep(now=clock.now + timedelta(days=30))
        assert self._raw(store, "k") == bytes(frame)

    def test_garbage_where_a_frame_should_be(self, store: Store) -> None:
        for garbage in (b"", b"{}", b"hello world", bytes(range(256)) * 4):
            self._plant(store, "k", garbage)
            with pytest.raises(FormatError) as info:
                store.load("k")
            assert isinstance(info.value, BerthError)
        # Listed, flagged, never hidden: an enumerator must not take an older frame for the latest.
        (item,) = store.list()
        assert item.key == "k" and item.error

    # --- integrity at the seams (issue 12) ----------------------------------------------

    def test_one_bad_value_never_stops_list_sweep_or_reseal(self, store: Store, clock: FakeClock) -> None:
        store.save("a", make_envelope("ra", deadline=clock.now - timedelta(seconds=1)))
        self._plant(store, "b", b"not a frame, something else's value")
        frame = bytearray(self._raw(store, "a"))
        frame[PREFIX_SIZE + 2] ^= 0xFF  # inside the header JSON: a header that cannot be read
        self._plant(store, "c", bytes(frame))
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
        recorder = _EventBackend(backend_opener(), events)
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
        recorder = _EventBackend(backend_opener(), events)
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
            self._assert_clean(info.value, "k")
        assert recorder.calls == []

    def test_guarantees_are_fixed_at_open(self, make_store: Callable[..., Store]) -> None:
        store = make_store()
        with pytest.raises(AttributeError):
            store.accept_plaintext = True  # type: ignore[misc]
        with pytest.raises(AttributeError):
            store.sealer = PlaintextSealer()  # type: ignore[misc]
        assert store.accept_plaintext is False and not isinstance(store.sealer, PlaintextSealer)


# --- the same cases through berth.aio ----------------------------------------------------------


def _threaded(backend_opener: Callable[[], Backend]) -> AsyncBackend:
    return ThreadedBackend(backend_opener())


def _aclaim_worker(
    opener: Callable[[], AsyncBackend], identity: str, sealer: Sealer, keys: list[str], start: Any, results: Any
) -> None:
    async def race() -> list[str]:
        store = AsyncStore(opener(), identity=identity, sealer=sealer)
        try:
            got = await asyncio.gather(*(store.claim(key) for key in keys))
        finally:
            await store.aclose()
        return [key for key, env in zip(keys, got, strict=True) if env is not None]

    start.wait()
    results.put(asyncio.run(race()))


class _Portal:
    """An event loop in a thread: sync callers (the shared cases, their threads) await through it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="berth-contract-loop", daemon=True)
        self._thread.start()

    def call(self, awaitable: Any) -> Any:
        async def wrapped() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class AwaitingStore:
    """A `Store`-shaped face of an `AsyncStore`: every call awaited on a portal's loop.

    It lets the shared cases of `StoreContract` drive the async API unchanged.
    """

    def __init__(self, store: AsyncStore, portal: _Portal):
        self.aio = store
        self._portal = portal
        self.identity = store.identity
        self.sealer = store.sealer
        self.backend = store.sync.backend

    def now(self) -> datetime:
        return self.aio.now()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.aio, name)

        def awaited(*args: Any, **kwargs: Any) -> Any:
            return self._portal.call(method(*args, **kwargs))

        return awaited

    def list(self, prefix: str = "", **kwargs: Any) -> Iterator[Listing]:
        # bad arguments raise here, before any I/O, as in Store.list
        return self._pulled(self.aio.list(prefix, **kwargs))

    def load_prefix(self, prefix: str = "", **kwargs: Any) -> Iterator[tuple[str, Parked]]:
        return self._pulled(self.aio.load_prefix(prefix, **kwargs))

    def _pulled(self, rows: AsyncIterator[T]) -> Iterator[T]:
        while True:
            try:
                yield self._portal.call(rows.__anext__())
            except StopAsyncIteration:
                return

    def close(self) -> None:
        self._portal.call(self.aio.aclose())


class AsyncStoreContract(StoreContract):
    """Every case of `StoreContract`, driven through `berth.aio.AsyncStore`.

    Override `backend_opener` as for `StoreContract`; override `async_backend_opener`
    (a picklable zero-argument callable returning an `AsyncBackend` onto the same
    namespace) to race a native async backend -- by default the sync backend runs in
    `ThreadedBackend`. A store made on an explicit sync backend (a recording wrapper)
    runs it in threads.
    """

    # The frame is opened by the same code sync or async: a sample of positions proves the async
    # load refuses what the sync one does, at a seventh of the round trips.
    tamper_stride = 7
    # Each racing process claims all its keys at once (asyncio.gather): two processes of 200
    # concurrent claims race as hard as four sequential ones, for half the interpreter start-ups.
    process_race_workers = 2

    @pytest.fixture
    def async_backend_opener(self, backend_opener: Callable[[], Backend]) -> Callable[[], AsyncBackend]:
        """Override to open a native async backend onto the same namespace."""
        return functools.partial(_threaded, backend_opener)

    @pytest.fixture
    def make_store(
        self, async_backend_opener: Callable[[], AsyncBackend], sealer: Sealer, clock: FakeClock
    ) -> Iterator[Callable[..., AwaitingStore]]:
        portal = _Portal()
        opened: list[AwaitingStore] = []

        def make(identity: str = "contract", **kw: Any) -> AwaitingStore:
            kw.setdefault("sealer", sealer)
            kw.setdefault("clock", clock)
            given = kw.pop("backend", None)
            backend = ThreadedBackend(given) if given is not None else async_backend_opener()
            store = AwaitingStore(AsyncStore(backend, identity=identity, **kw), portal)
            opened.append(store)
            return store

        try:
            yield make
        finally:
            for store in opened:
                store.close()
            portal.close()

    def _race_worker(
        self, backend_opener: Callable[[], Backend], request: pytest.FixtureRequest
    ) -> tuple[Callable[[], Any], Callable[..., None]]:
        return request.getfixturevalue("async_backend_opener"), _aclaim_worker

    def test_async_long_header_is_listed_by_a_ranged_read(self, make_store: Callable[..., Any]) -> None:
        # The shared case above runs the async store over a recording sync backend in threads;
        # this one lists through the store's own async backend (native on PostgreSQL and Redis).
        labels = {f"label-{i:02d}": "v" * 40 for i in range(24)}  # a header over 1 KiB
        store = make_store()
        store.save("big", make_envelope(labels=labels, provider_state={"blob": "x" * 200_000}))
        backend = store.aio.backend
        ranged: list[int] = []
        own_head = backend.head

        async def whole_frame(name: str) -> Any:
            raise AssertionError(f"listing a long header read the whole frame of {name!r}")

        async def head(name: str, size: int) -> Any:
            ranged.append(size)
            return await own_head(name, size)

        backend.get, backend.head = whole_frame, head
        try:
            (item,) = store.list()
        finally:
            del backend.get, backend.head
        assert item.error is None and dict(item.labels) == labels and item.size > 200_000
        assert ranged and 1024 < ranged[0] < 4096, "the header alone was read, by its declared length"

    def test_async_sweep_reports_each_removal(self, make_store: Callable[..., Any], clock: FakeClock) -> None:
        store = make_store()
        for i in range(5):
            store.save(f"s/{i}", make_envelope(f"r{i}", deadline=clock.now - timedelta(seconds=1)))
        store.save("live", make_envelope("live", deadline=clock.now + timedelta(hours=1)))
        removed: list[str] = []
        assert store.sweep(on_removed=lambda item: removed.append(item.key)) == 5
        assert sorted(removed) == [f"s/{i}" for i in range(5)]
        assert [item.key for item in store.list()] == ["live"]

    def test_guarantees_are_fixed_at_open(self, make_store: Callable[..., Any]) -> None:
        aio = make_store().aio
        with pytest.raises(AttributeError):
            aio.accept_plaintext = True
        with pytest.raises(AttributeError):
            aio.sealer = PlaintextSealer()
        assert aio.accept_plaintext is False and not isinstance(aio.sealer, PlaintextSealer)


class _EventBackend(RecordingBackend):
    """Records "read" for every frame a listing yields and "get"/"delete" for those calls, in order."""

    def __init__(self, inner: Backend, events: list[str]):
        super().__init__(inner)
        self.events = events

    def get(self, name: str) -> tuple[Data, Token] | None:
        self.events.append("get")
        return self.inner.get(name)

    def delete(self, name: str, token: Token) -> None:
        self.events.append("delete")
        self.inner.delete(name, token)

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        for row in super().heads(prefix, size):
            self.events.append("read")
            yield row

    def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        self.events.append("head")
        return self.inner.head(name, size)
