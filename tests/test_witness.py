"""The witness (issue 20): every attack refused at load or reported by audit(), on every local and server backend.

Attacks are made the way an operator with write access to the storage (and no keys) would: through
a second, raw backend on the same URL, never through the store.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth
import berth.aio
from berth._frames import FrameIO, SyncIO
from berth._plan import INLINE, Call, Cpu, run
from berth.backends import open_backend
from berth.backends.memory import MemoryBackend
from berth.testing import AsyncStoreContract, RecordingBackend, StoreContract, make_envelope
from tests.conftest import require

IDENTITY = "wit"
KINDS = ["memory", "file", "sqlite", "postgresql", "redis"]


@dataclass
class Setup:
    """Where a witnessed store lives, and raw backends on its two URLs (the attacker's view)."""

    url: str
    witness_url: str
    sealer: berth.Sealer
    frames: Any
    witness: Any

    def store(self, **options: Any) -> berth.Store:
        return berth.open_store(self.url, identity=IDENTITY, sealer=self.sealer, witness=self.witness_url, **options)

    def astore(self) -> berth.aio.AsyncStore:
        return berth.aio.open_store(self.url, identity=IDENTITY, sealer=self.sealer, witness=self.witness_url)

    def frame(self, key: str) -> bytes | None:
        found = self.frames.get(f"{IDENTITY}/{key}")
        return None if found is None else found[0]

    def put_frame(self, key: str, data: bytes) -> None:
        self.frames.put(f"{IDENTITY}/{key}", data)

    def drop_frame(self, key: str) -> None:
        found = self.frames.get(f"{IDENTITY}/{key}")
        assert found is not None
        self.frames.delete(f"{IDENTITY}/{key}", found[1])

    def witness_names(self) -> list[str]:
        return sorted(self.witness.scan(f"{IDENTITY}:witness/"))


def _urls(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    if kind == "memory":
        return f"memory://s{tag}", f"memory://w{tag}"
    if kind == "file":
        return f"file://{tmp_path}/store", f"file://{tmp_path}/witness"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/store.db", f"sqlite:///{tmp_path}/witness.db"
    if kind == "postgresql":
        psycopg = require("psycopg", "PostgreSQL")
        dsn = request.getfixturevalue("postgres_dsn")
        schemas = [f"berth_w_{tag}", f"berth_ww_{tag}"]

        def drop() -> None:
            with psycopg.connect(dsn, autocommit=True) as admin:
                for schema in schemas:
                    admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

        request.addfinalizer(drop)
        return f"{dsn}?schema={schemas[0]}&pool_max_size=4", f"{dsn}?schema={schemas[1]}&pool_max_size=4"
    redis = require("redis", "Redis")
    url = request.getfixturevalue("redis_url")
    prefixes = [f"bws{tag}:", f"bww{tag}:"]

    def unlink() -> None:
        admin = redis.Redis.from_url(url)
        for prefix in prefixes:
            keys = list(admin.scan_iter(match=prefix + "*"))
            if keys:
                admin.unlink(*keys)
        admin.close()

    request.addfinalizer(unlink)
    return (
        f"{url}?prefix={prefixes[0]}&check_durability=false",
        f"{url}?prefix={prefixes[1]}&check_durability=false",
    )


@pytest.fixture(params=KINDS)
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    url, witness_url = _urls(request.param, tmp_path, request)
    frames, witness = open_backend(url), open_backend(witness_url)
    yield Setup(url, witness_url, berth.AesGcmSealer(berth.Keyring.generate()), frames, witness)
    for backend in (frames, witness):
        close = getattr(backend, "close", None)
        if close is not None:
            close()


@pytest.fixture
def store(setup: Setup) -> Iterator[berth.Store]:
    with setup.store() as opened:
        yield opened


def _park(store: berth.Store, key: str, run: str, **changes: Any) -> None:
    store.save(key, make_envelope(run, **changes))


# --- what works as before ---------------------------------------------------------------------


def test_the_contract_holds_with_a_witness(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    _park(store, "a", "r2")
    parked = store.load("a")
    assert parked is not None and parked.envelope.run_id == "r2"
    with pytest.raises(berth.TokenMismatch):
        store.save("a", make_envelope("r3"), if_absent=True)
    token = store.save("a", make_envelope("r3"), if_match=parked.token)
    with pytest.raises(berth.TokenMismatch):
        store.save("a", make_envelope("r4"), if_match=parked.token)
    with pytest.raises(berth.TokenMismatch):
        store.delete("a", parked.token)
    store.delete("a", token)
    assert store.load("a") is None and store.claim("a") is None
    _park(store, "a", "r5")
    claimed = store.claim("a")
    assert claimed is not None and claimed.run_id == "r5"
    assert store.claim("a") is None
    _park(store, "b", "r6", deadline=datetime.now(timezone.utc) - timedelta(seconds=1))
    with pytest.raises(berth.Expired):
        store.claim("b")
    assert store.load("b") is None
    _park(store, "c", "r7", deadline=datetime.now(timezone.utc) - timedelta(seconds=1))
    _park(store, "d", "r8")
    assert store.sweep() == 1
    assert [x.key for x in store.list()] == ["d"]
    assert [p and p.envelope.run_id for p in store.load_many(["d", "c"])] == ["r8", None]
    _park(store, "t/1", "r9")
    _park(store, "t/2", "r10")
    assert store.delete_prefix("t/") == 2
    report = store.audit()
    assert report.ok and report.checked >= 6, report
    # each frame carries its sequence number; a key's numbers only grow
    assert b'"seq":' in (setup.frame("d") or b"")


def test_reseal_under_a_witness_takes_a_new_sequence_number(setup: Setup) -> None:
    keyring = berth.Keyring.generate()
    setup.sealer = berth.AesGcmSealer(keyring)
    with setup.store() as store:
        _park(store, "a", "r1")
    old = setup.frame("a")
    setup.sealer = berth.AesGcmSealer(keyring.rotate())
    with setup.store() as store:
        assert store.reseal() == 1
        parked = store.load("a")
        assert parked is not None and parked.envelope.run_id == "r1"
        assert store.audit().ok
        assert old is not None
        setup.put_frame("a", old)  # the frame under the retired key, put back
        with pytest.raises(berth.IntegrityError, match="not the latest"):
            store.load("a")
        assert store.reseal().failed == 1  # a replayed frame is never laundered by a reseal


def test_without_a_witness_frames_carry_no_sequence_number(setup: Setup) -> None:
    with berth.open_store(setup.url, identity=IDENTITY, sealer=setup.sealer) as plain:
        _park(plain, "a", "r1")
        with pytest.raises(berth.BerthError, match="no witness"):
            plain.audit()
    assert b'"seq"' not in (setup.frame("a") or b"")
    assert setup.witness_names() == []


# --- the attacks --------------------------------------------------------------------------------


def test_deleting_the_newest_frame_of_a_key_is_refused_and_reported(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    _park(store, "a", "r2")
    setup.drop_frame("a")
    with pytest.raises(berth.IntegrityError, match=r"identity 'wit', key 'a' is missing") as info:
        store.load("a")
    assert info.value.key == "a" and "customer text" not in str(info.value)
    with pytest.raises(berth.IntegrityError, match="missing"):
        store.claim("a")
    report = store.audit()
    assert not report.ok and report.missing == ("a",) and not report.replayed


def test_no_save_reopens_a_key_whose_run_the_witness_saw_parked_and_is_missing(
    store: berth.Store, setup: Setup
) -> None:
    """A first-writer-wins slot is never reopened without a trace: refused until an operator acknowledges."""
    _park(store, "a", "r1")
    setup.drop_frame("a")  # a storage writer deletes the parked run
    for save in (
        lambda: store.save("a", make_envelope("r2"), if_absent=True),
        lambda: store.save("a", make_envelope("r2")),
    ):
        with pytest.raises(berth.IntegrityError, match=r"save at identity 'wit', key 'a' refused: .* frame 1 parked"):
            save()
    for read in (lambda: store.load("a"), lambda: store.claim("a")):  # refused, never "nothing parked"
        with pytest.raises(berth.IntegrityError, match="missing"):
            read()
    assert store.audit().missing == ("a",)  # still: nothing written meanwhile
    assert store.acknowledge("b") is False  # nothing missing there: nothing recorded
    assert store.acknowledge("a") is True  # the operator accepts the run is gone
    assert store.acknowledge("a") is False
    assert store.audit().ok and store.load("a") is None
    store.save("a", make_envelope("r3"), if_absent=True)
    assert (claimed := store.claim("a")) is not None and claimed.run_id == "r3"
    assert store.audit().ok


def test_a_save_over_an_older_frame_put_in_place_of_the_parked_one_is_refused(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    old = setup.frame("a")
    _park(store, "a", "r2")
    assert old is not None
    setup.put_frame("a", old)  # r2, never claimed, replaced by r1
    with pytest.raises(berth.IntegrityError, match="holds frame 1 .replayed."):
        store.save("a", make_envelope("r3"))
    assert store.acknowledge("a") is True
    with pytest.raises(berth.IntegrityError, match="not the latest"):
        store.load("a")  # the older frame is still not served
    assert store.audit().replayed == ("a",)
    _park(store, "a", "r3")  # the host's own write supersedes it
    parked = store.load("a")
    assert parked is not None and parked.envelope.run_id == "r3" and store.audit().ok


def test_async_acknowledge(setup: Setup) -> None:
    with setup.store() as store:
        _park(store, "a", "r1")
    setup.drop_frame("a")

    async def main() -> None:
        async with setup.astore() as astore:
            with pytest.raises(berth.IntegrityError, match="refused"):
                await astore.save("a", make_envelope("r2"), if_absent=True)
            assert await astore.acknowledge("a") is True
            await astore.save("a", make_envelope("r2"), if_absent=True)
            assert (await astore.audit()).ok
        async with berth.aio.open_store(setup.url, identity=IDENTITY, sealer=setup.sealer) as plain:
            with pytest.raises(berth.BerthError, match="no witness"):
                await plain.acknowledge("a")

    asyncio.run(main())


def test_audit_reads_each_frame_once(store: berth.Store, setup: Setup) -> None:
    setup.frames = store.backend
    for i in range(4):
        _park(store, f"k{i}", f"r{i}")
    old = setup.frame("k1")
    _park(store, "k1", "r1b")
    assert old is not None
    setup.put_frame("k1", old)  # replayed
    setup.drop_frame("k2")  # missing
    frames = _Reads(store.backend)
    store.backend, real = frames, store.backend  # type: ignore[assignment]
    try:
        report = store.audit()
    finally:
        store.backend = real
    assert report.replayed == ("k1",) and report.missing == ("k2",) and report.checked == 4
    # k0, k1 and k3 read whole once each, k2 found gone once; the rest are heads (tokens, presence)
    assert frames.calls["get"] == 4, frames.calls


def test_deleting_one_in_the_middle_of_a_series_of_keys(store: berth.Store, setup: Setup) -> None:
    for i in range(9):
        _park(store, f"k{i}", f"r{i}")
    setup.drop_frame("k4")
    report = store.audit()
    assert report.missing == ("k4",) and not (report.replayed or report.unknown or report.tampered)
    for i in (0, 3, 5, 8):
        parked = store.load(f"k{i}")
        assert parked is not None and parked.envelope.run_id == f"r{i}"


def test_putting_back_an_older_frame_is_refused(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    old = setup.frame("a")
    _park(store, "a", "r2")
    assert old is not None
    setup.put_frame("a", old)
    with pytest.raises(berth.IntegrityError, match="not the latest"):
        store.load("a")
    with pytest.raises(berth.IntegrityError):
        store.claim("a")
    assert store.audit().replayed == ("a",)
    assert setup.frame("a") == old  # a refused claim leaves the evidence in place


def test_putting_back_a_claimed_frame_is_refused(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    latest = setup.frame("a")
    assert store.claim("a") is not None and latest is not None
    setup.put_frame("a", latest)  # the very frame that was claimed, replayed
    with pytest.raises(berth.IntegrityError, match="claimed"):
        store.claim("a")
    assert store.audit().replayed == ("a",)


def test_a_frame_the_witness_never_saw_is_refused(store: berth.Store, setup: Setup) -> None:
    with berth.open_store(setup.url, identity=IDENTITY, sealer=setup.sealer) as unwitnessed:
        _park(unwitnessed, "a", "r1")  # same keys, no witness: no sequence number, no record
    with pytest.raises(berth.IntegrityError, match="never saw"):
        store.load("a")
    assert store.audit().unknown == ("a",)


def test_restoring_the_store_from_an_older_copy_is_reported(store: berth.Store, setup: Setup) -> None:
    for key in ("same", "resaved", "claimed", "later-deleted"):
        _park(store, key, f"{key}-1")
    copy = {name: setup.frames.get(name)[0] for name in setup.frames.scan(f"{IDENTITY}/")}
    _park(store, "resaved", "resaved-2")
    assert store.claim("claimed") is not None
    _park(store, "new", "new-1")
    # the restore: every name back as in the copy, names the copy lacks removed
    for name in list(setup.frames.scan(f"{IDENTITY}/")):
        found = setup.frames.get(name)
        if name not in copy:
            setup.frames.delete(name, found[1])
        elif found[0] != copy[name]:
            setup.frames.put(name, copy[name])
    for name, data in copy.items():
        if setup.frames.get(name) is None:
            setup.frames.put(name, data)
    report = store.audit()
    assert report.replayed == ("claimed", "resaved")
    assert report.missing == ("new",)
    assert not report.ok
    parked = store.load("same")
    assert parked is not None and parked.envelope.run_id == "same-1"


def test_editing_the_witness_is_refused(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    _park(store, "b", "r2")
    name = f"{IDENTITY}:witness/a"
    data, _ = setup.witness.get(name)
    edited = bytearray(data)
    edited[-5] ^= 1
    setup.witness.put(name, bytes(edited))
    with pytest.raises(berth.IntegrityError, match="witness record .* does not open"):
        store.load("a")
    report = store.audit()
    assert report.tampered == ("a",) and not report.ok
    # a record moved onto another key does not open either
    setup.witness.put(name, setup.witness.get(f"{IDENTITY}:witness/b")[0])
    with pytest.raises(berth.IntegrityError, match="witness record"):
        store.claim("a")


def test_truncating_the_witness_is_refused(store: berth.Store, setup: Setup) -> None:
    for key in ("a", "b", "c"):
        _park(store, key, key)
    name = f"{IDENTITY}:witness/a"
    data, _ = setup.witness.get(name)
    setup.witness.put(name, data[: len(data) // 2])  # one record cut short
    with pytest.raises(berth.IntegrityError, match="witness record"):
        store.load("a")
    for name in setup.witness_names():  # then the whole witness emptied
        setup.witness.delete(name, setup.witness.get(name)[1])
    with pytest.raises(berth.IntegrityError, match="never saw"):
        store.claim("b")
    assert store.audit().unknown == ("a", "b", "c")


def test_rolling_the_witness_back_alone_is_refused(store: berth.Store, setup: Setup) -> None:
    _park(store, "a", "r1")
    name = f"{IDENTITY}:witness/a"
    old_record = setup.witness.get(name)[0]
    _park(store, "a", "r2")
    setup.witness.put(name, old_record)
    with pytest.raises(berth.IntegrityError, match="never saw"):
        store.load("a")
    assert store.audit().unknown == ("a",)


def test_the_coordinator_never_resumes_a_replayed_run(setup: Setup) -> None:
    with setup.store() as store:
        questions = berth.open_questions(setup.url, identity=IDENTITY, sealer=setup.sealer)
        coordinator = berth.Coordinator(store, questions)
        coordinator.suspend("a", make_envelope("r1"), question="Ship it?")
        old = setup.frame("a")
        coordinator.suspend("a", make_envelope("r2"), question="Ship it now?")
        assert old is not None
        setup.put_frame("a", old)
        pending = questions.pending("a")
        assert pending is not None
        questions.provide("a", pending.id, "yes", by="maintainer")
        wake = coordinator.wake("a")
        assert wake.decision is berth.WakeDecision.REARM
        assert isinstance(wake.error, berth.IntegrityError) and wake.envelope is None
        questions.close()


# --- crash safety: every prefix of a save and a claim -------------------------------------------


def _steps(store: berth.Store, plan: Any) -> int:
    """How many I/O steps `plan` makes when it runs to its end."""
    targets = _targets(store)
    n, step = 0, next(plan)
    try:
        while True:
            n += 1
            step = plan.send(getattr(targets[step.role], step.method)(*step.args, **step.kwargs))
    except StopIteration:
        return n


def _killed_after(store: berth.Store, plan: Any, steps: int) -> None:
    """Run the first `steps` I/O steps of `plan`, then drop it: a SIGKILL at that point."""
    targets = _targets(store)
    step: Call[Any] = next(plan)
    for _ in range(steps):
        try:
            step = plan.send(getattr(targets[step.role], step.method)(*step.args, **step.kwargs))
        except StopIteration:
            return


def test_the_plans_have_the_steps_the_crash_tests_cut(store: berth.Store) -> None:
    import functools

    assert _w(store) is not None
    env = make_envelope("r1")
    build = functools.partial(store.core.seal, "a", env, store.now())
    # a first save: read the record (none: nothing should be there), record the candidate, write
    # the frame (if absent), record it landed
    assert _steps(store, _w(store).save(store.core, "a", build, False, None)) == 4
    # over a landed frame: the same four, the write conditional on the generation the record names
    assert _steps(store, _w(store).save(store.core, "a", build, False, None)) == 4
    parked = store.load("a")
    assert parked is not None
    # leave: read frame, read record, record the intent, delete, record how it left
    assert _steps(store, _w(store).leave(store.core, "a", parked.token, "claimed")) == 5
    store.save("a", env)
    parked = store.load("a")
    assert parked is not None
    # a delete by token: the same five, the frame read by its head
    assert _steps(store, _w(store).leave(store.core, "a", parked.token, "deleted", whole=False)) == 5
    store.save("a", env)
    # a claim's leave reuses its load's snapshot: intent, delete, record how it left
    seen = run(_w(store).load_seen(store.core, "a", False), _targets(store))[1]
    assert _steps(store, _w(store).leave(store.core, "a", seen.found[1], "claimed", seen)) == 3


class _Reads:
    """A backend wrapper counting the reads a plan makes of it, by method."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.calls = backend, collections.Counter[str]()

    def __getattr__(self, method: str) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[method] += 1
            return getattr(self.backend, method)(*args, **kwargs)

        return counted


def _w(store: berth.Store) -> Any:
    """The store's witness (its frames strategy's)."""
    return getattr(store.frames, "witness", None)


def _targets(store: berth.Store) -> dict[Any, Any]:
    return {FrameIO: SyncIO(store.backend, store.frames.records), Cpu: INLINE}


def test_a_save_reads_no_frame_a_delete_only_its_head_and_a_claim_the_frame_once(store: berth.Store) -> None:
    import functools

    assert _w(store) is not None
    env = make_envelope("r1", provider_state={"blob": "x" * 200_000})
    _park(store, "a", "r0")
    frames = _Reads(store.backend)
    targets = {FrameIO: SyncIO(frames, store.frames.records), Cpu: INLINE}
    build = functools.partial(store.core.seal, "a", env, store.now())
    run(_w(store).save(store.core, "a", build, False, None), targets)  # over a landed frame: the record says
    assert frames.calls["get"] == 0 and frames.calls["head"] == 0, frames.calls
    parked = store.load("a")
    assert parked is not None and parked.envelope.run_id == "r1"
    frames.calls.clear()
    run(_w(store).leave(store.core, "a", parked.token, "deleted", whole=False), targets)
    assert frames.calls["get"] == 0 and frames.calls["head"] == 1, frames.calls
    assert store.load("a") is None and store.audit().ok
    _park(store, "b", "r2")
    frames.calls.clear()
    store.backend, real = frames, store.backend  # type: ignore[assignment]
    try:
        claimed = store.claim("b")
    finally:
        store.backend = real
    assert claimed is not None and claimed.run_id == "r2"
    assert frames.calls["get"] == 1 and frames.calls["head"] == 0, frames.calls
    assert store.load("b") is None and store.audit().ok


def test_a_head_read_never_stands_for_a_frame_the_witness_did_not_see_land(store: berth.Store, setup: Setup) -> None:
    """A frame put back (another generation) is judged whole: a delete of it leaves the key reported."""
    setup.frames, setup.witness = store.backend, store.frames.records
    _park(store, "a", "r1")
    older = setup.frame("a")
    _park(store, "a", "r2")
    assert older is not None
    setup.put_frame("a", older)  # replayed: seq 1 under a record of seq 2
    token = setup.frames.get(f"{IDENTITY}/a")[1]
    store.delete("a", token)  # a token from a listing, not a load: removes it, says nothing left
    assert store.audit().missing == ("a",)


def _local_setup(kind: str, tmp_path: Path, n: int) -> Setup:
    url, witness_url = (f"memory://s{uuid.uuid4().hex}", f"memory://w{uuid.uuid4().hex}")
    if kind == "sqlite":
        url, witness_url = f"sqlite:///{tmp_path}/s{n}.db", f"sqlite:///{tmp_path}/w{n}.db"
    return Setup(url, witness_url, berth.AesGcmSealer(berth.Keyring.generate()), None, None)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_save_killed_at_any_step_leaves_a_readable_run_and_no_replay(kind: str, tmp_path: Path) -> None:
    import functools

    for cut in range(6):
        setup = _local_setup(kind, tmp_path, cut)
        with setup.store() as store:
            setup.frames, setup.witness = store.backend, store.frames.records
            _park(store, "a", "r1")
            _park(store, "a", "r2")
            older = setup.frame("a")
            assert _w(store) is not None
            env = make_envelope("r3")
            assert env.created_at is None
            build = functools.partial(store.core.seal, "a", env, store.now())
            _killed_after(store, _w(store).save(store.core, "a", build, False, None), cut)
            with setup.store() as fresh:  # the next host
                parked = fresh.load("a")
                assert parked is not None and parked.envelope.run_id in ("r2", "r3"), cut
                assert fresh.audit().ok, cut
                assert older is not None
                setup.put_frame("a", older)  # an attacker replays r1 right after the kill
                with pytest.raises(berth.IntegrityError):
                    fresh.load("a")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("mode", ["whole", "head", "seen"])
def test_a_claim_killed_at_any_step_never_resumes_twice(kind: str, mode: str, tmp_path: Path) -> None:
    for cut in range(6):
        setup = _local_setup(kind, tmp_path, cut)
        with setup.store() as store:
            setup.frames, setup.witness = store.backend, store.frames.records
            _park(store, "a", "r1")
            latest = setup.frame("a")
            assert _w(store) is not None
            parked, seen = run(_w(store).load_seen(store.core, "a", False), _targets(store))
            assert parked is not None
            plan = _w(store).leave(
                store.core, "a", parked.token, "claimed", seen if mode == "seen" else None, whole=mode == "whole"
            )
            _killed_after(store, plan, cut)
            with setup.store() as fresh:
                now = fresh.load("a")
                gone = setup.frame("a") is None
                assert (now is None) == gone, cut  # gone, or still there and readable
                assert fresh.audit().ok, cut
                if gone:
                    assert latest is not None
                    setup.put_frame("a", latest)  # the claimed frame, replayed after the kill
                    with pytest.raises(berth.IntegrityError):
                        fresh.claim("a")
                else:
                    claimed = fresh.claim("a")
                    assert claimed is not None and claimed.run_id == "r1"
                    assert fresh.audit().ok


# --- races ---------------------------------------------------------------------------------------


def test_claim_races_stay_exactly_once(setup: Setup) -> None:
    keys = [f"race/{i}" for i in range(6)]
    with setup.store() as store:
        for key in keys:
            _park(store, key, key)
    won: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def claimer() -> None:
        with setup.store() as mine:
            for key in keys:
                try:
                    got = mine.claim(key)
                except BaseException as exc:  # noqa: BLE001 - collected and failed below
                    errors.append(exc)
                    continue
                if got is not None:
                    with lock:
                        won.append(got.run_id)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(won) == sorted(keys)
    with setup.store() as store:
        assert store.audit().ok


def test_saves_racing_on_one_key_keep_every_load_good(setup: Setup) -> None:
    errors: list[BaseException] = []

    def saver(n: int) -> None:
        with setup.store() as mine:
            for i in range(5):
                try:
                    mine.save("hot", make_envelope(f"w{n}-{i}"))
                    mine.load("hot")
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)

    threads = [threading.Thread(target=saver, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with setup.store() as store:
        assert store.load("hot") is not None and store.audit().ok


# --- berth.aio ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "redis"])
def test_async_store_has_the_witness_too(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url, witness_url = _urls(kind, tmp_path, request)
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    raw = open_backend(url)

    async def main() -> None:
        async with berth.aio.open_store(url, identity=IDENTITY, sealer=sealer, witness=witness_url) as store:
            await store.save("a", make_envelope("r1"))
            old = raw.get(f"{IDENTITY}/a")[0]
            await store.save("a", make_envelope("r2"))
            parked = await store.load("a")
            assert parked is not None and parked.envelope.run_id == "r2"
            assert (await store.audit()).ok
            raw.put(f"{IDENTITY}/a", bytes(old))
            with pytest.raises(berth.IntegrityError, match="not the latest"):
                await store.claim("a")
            assert (await store.audit()).replayed == ("a",)
            await store.save("b", make_envelope("r3"))
            got = await asyncio.gather(*(store.claim("b") for _ in range(4)))
            assert [g.run_id for g in got if g is not None] == ["r3"]
            await store.save("c", make_envelope("r4", deadline=datetime.now(timezone.utc) - timedelta(seconds=1)))
            assert await store.sweep() == 1
            assert (await store.audit()).replayed == ("a",)

    try:
        asyncio.run(main())
    finally:
        close: Callable[[], None] | None = getattr(raw, "close", None)
        if close is not None:
            close()


def test_async_seals_hashes_and_opens_a_large_witnessed_frame_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import berth._witness as witness_module
    from berth._store import StoreCore

    where: dict[str, list[tuple[bool, bool]]] = {"seal": [], "hash": [], "open": []}  # (large, on the loop)
    real_seal, real_open, real_info = StoreCore.seal, StoreCore.opened, witness_module.frame_info

    def on_loop(what: str, data: bytes | None) -> None:
        large = data is not None and len(data) >= berth.aio.OFF_LOOP_BYTES
        where[what].append((large, threading.current_thread() is threading.main_thread()))

    def seal(self: StoreCore, *args: Any) -> Any:
        frame = real_seal(self, *args)
        on_loop("seal", frame)
        return frame

    def opened(self: StoreCore, key: str, found: Any, *args: Any) -> Any:
        on_loop("open", None if found is None else found[0])
        return real_open(self, key, found, *args)

    def frame_info(found: Any, *args: Any, **kwargs: Any) -> Any:
        on_loop("hash", None if found is None else found[0])
        return real_info(found, *args, **kwargs)

    monkeypatch.setattr(StoreCore, "seal", seal)
    monkeypatch.setattr(StoreCore, "opened", opened)
    monkeypatch.setattr(witness_module, "frame_info", frame_info)
    big = {"blob": "x" * (berth.aio.OFF_LOOP_BYTES + 1)}
    sealer = berth.AesGcmSealer(berth.Keyring.generate())

    async def main() -> None:
        url, witness_url = f"memory://s{uuid.uuid4().hex}", f"memory://w{uuid.uuid4().hex}"
        async with berth.aio.open_store(url, identity=IDENTITY, sealer=sealer, witness=witness_url) as store:
            await store.save("small", make_envelope())
            await store.save("big", make_envelope(provider_state=big))
            assert (await store.load("small")) is not None
            parked = await store.load("big")
            assert parked is not None and parked.envelope.state() == big
            assert (await store.claim("big")) is not None
            seen = {what: list(calls) for what, calls in where.items()}
            assert (await store.audit()).ok  # (audit runs in a worker thread, as without a witness)
            where.update(seen)

    asyncio.run(main())  # the loop runs in the main thread
    for what, calls in where.items():  # small on the loop, large off it; and some of each
        assert {large for large, _ in calls} == {True, False}, (what, calls)
        assert all(large != on for large, on in calls), (what, calls)


# --- the whole store contract, with a witness ----------------------------------------------------


class TestWitnessedContract(StoreContract):
    """Every case of the conformance suite on a store with a witness (memory://, both in this process).

    The cases that plant frames written without this witness's sealer, or put the latest frame back
    through the backend, are overridden below with what the witness does instead: it refuses them.
    """

    cross_process = False

    @pytest.fixture
    def backend_opener(self) -> Callable[[], Any]:
        return functools.partial(MemoryBackend.from_url, f"memory://wc-{uuid.uuid4().hex}")

    @pytest.fixture
    def make_store(
        self, backend_opener: Callable[[], Any], sealer: berth.Sealer, clock: Any
    ) -> Iterator[Callable[..., berth.Store]]:
        witness = f"memory://wcw-{uuid.uuid4().hex}"
        opened: list[berth.Store] = []

        def make(identity: str = "contract", **kw: Any) -> berth.Store:
            kw.setdefault("sealer", sealer)
            kw.setdefault("clock", clock)
            backend = kw.pop("backend", None) or backend_opener()
            store = berth.Store(backend, identity=identity, witness=MemoryBackend.from_url(witness), **kw)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()

    def test_sweep_needs_no_keys(self, make_store: Callable[..., berth.Store], clock: Any) -> None:
        # With a witness a sweep records each removal, sealed: without the keys it removes nothing.
        make_store().save("k", make_envelope(deadline=clock.now - timedelta(seconds=1)))
        with pytest.raises(berth.IntegrityError, match="witness record"):
            make_store(sealer=berth.PlaintextSealer()).sweep()
        assert make_store().sweep() == 1

    def test_every_changed_byte_fails_to_open(self, store: berth.Store) -> None:
        store.save("k", make_envelope())
        frame = self._raw(store, "k")
        for pos in range(0, len(frame), 97):
            bad = bytearray(frame)
            bad[pos] ^= 0x01
            self._plant(store, "k", bytes(bad))
            with pytest.raises((berth.IntegrityError, berth.FormatError)):
                store.load("k")
        self._plant(store, "k", frame)  # the latest frame itself, put back: another generation
        with pytest.raises(berth.IntegrityError, match="not the latest"):
            store.load("k")

    def _foreign_frame_refused(self, make_store: Callable[..., berth.Store], **other: Any) -> None:
        make_store(**other).save("k", make_envelope())  # the same witness, under another sealer
        with pytest.raises(berth.IntegrityError):
            make_store().load("k")

    def test_plaintext_frame_in_a_sealed_store_is_refused(self, make_store: Callable[..., berth.Store]) -> None:  # type: ignore[override]
        self._foreign_frame_refused(make_store, sealer=berth.PlaintextSealer())

    def test_sealed_frame_in_a_plaintext_store_names_the_key_needed(
        self, make_store: Callable[..., berth.Store], sealer: berth.Sealer
    ) -> None:
        make_store().save("k", make_envelope())
        with pytest.raises(berth.IntegrityError):
            make_store(sealer=berth.PlaintextSealer()).load("k")

    def test_reseal_moves_plaintext_to_the_sealer(self, make_store: Callable[..., berth.Store]) -> None:  # type: ignore[override]
        # Frames parked without the witness are never adopted by a reseal: it counts them as failed.
        legacy = berth.Store(make_store().backend, identity="contract", sealer=berth.PlaintextSealer())
        legacy.save("k", make_envelope())
        report = make_store(accept_plaintext=True).reseal()
        assert report == 0 and report.failed == 1

    def test_reseal_loses_to_a_concurrent_save(  # type: ignore[override]
        self, make_store: Callable[..., berth.Store], backend_opener: Callable[[], Any]
    ) -> None:
        # Witnessed: the save lands between the reseal's read and its conditional write (under the
        # key a rotation made current): the save wins, the reseal skips the key, the witness agrees.
        keyring = berth.Keyring.generate()
        make_store(sealer=berth.AesGcmSealer(keyring)).save("k", make_envelope("old"))
        current = berth.AesGcmSealer(keyring.rotate())
        writer = make_store(sealer=current)
        recorder = RecordingBackend(
            backend_opener(), before_conditional_put=lambda _name: writer.save("k", make_envelope("new"))
        )
        report = make_store(backend=recorder, sealer=current).reseal()
        assert report == 0 and report.skipped == 1 and report.failed == 0, repr(report)
        (listed,) = writer.list()
        assert listed.sealed_by == f"{current.name}:{current.key_id}"
        parked = writer.load("k")
        assert parked is not None and parked.envelope.run_id == "new"
        assert writer.audit().ok
        assert writer.claim("k") is not None and writer.audit().ok


class TestWitnessedAsyncContract(AsyncStoreContract, TestWitnessedContract):
    """The same, through berth.aio (the memory backends in worker threads)."""

    @pytest.fixture
    def make_store(
        self, async_backend_opener: Callable[[], Any], sealer: berth.Sealer, clock: Any
    ) -> Iterator[Callable[..., Any]]:
        from berth.testing import AwaitingStore, _Portal

        witness = f"memory://wcw-{uuid.uuid4().hex}"
        portal = _Portal()
        opened: list[Any] = []

        def make(identity: str = "contract", **kw: Any) -> Any:
            kw.setdefault("sealer", sealer)
            kw.setdefault("clock", clock)
            given = kw.pop("backend", None)
            backend = berth.aio.ThreadedBackend(given) if given is not None else async_backend_opener()
            store = berth.aio.AsyncStore(
                backend, identity=identity, witness=berth.aio.ThreadedBackend(MemoryBackend.from_url(witness)), **kw
            )
            opened.append(AwaitingStore(store, portal))
            return opened[-1]

        try:
            yield make
        finally:
            for store in opened:
                store.close()
            portal.close()


# --- berth audit --------------------------------------------------------------------------------


def test_berth_audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from berth._cli import cli

    keyring = tmp_path / "keys.json"
    berth.Keyring.generate().save(keyring)
    url, witness_url = f"sqlite:///{tmp_path}/s.db", f"sqlite:///{tmp_path}/w.db"
    for name in ("BERTH_KMS", "BERTH_URL", "BERTH_IDENTITY", "BERTH_KEYRING", "BERTH_WITNESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    env = {"BERTH_URL": url, "BERTH_IDENTITY": IDENTITY, "BERTH_KEYRING": str(keyring)}

    def berth_(*args: str, **more: str) -> Any:
        result = CliRunner().invoke(cli, list(args), env={**env, **more}, prog_name="berth")
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result

    assert berth_("audit").exit_code == 2  # no witness: bad usage, one line
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    with berth.open_store(url, identity=IDENTITY, sealer=sealer, witness=witness_url) as store:
        _park(store, "a", "r1")
        _park(store, "b", "r2")
    ok = berth_("audit", BERTH_WITNESS=witness_url)
    assert ok.exit_code == 0 and "2 keys checked" in ok.output, ok.output
    assert berth_("--witness", witness_url, "claim", "a").exit_code == 0  # the CLI's claims are witnessed too
    raw = open_backend(url)
    raw.delete(f"{IDENTITY}/b", raw.get(f"{IDENTITY}/b")[1])
    raw.close()
    bad = berth_("audit", "--json", BERTH_WITNESS=witness_url)
    assert bad.exit_code == 1
    doc = json.loads(bad.stdout)
    assert doc["ok"] is False and doc["missing"] == ["b"] and doc["replayed"] == []
    assert "disagree with the witness" in bad.stderr
    # frames parked before the store had a witness: unknown until adopted, then good
    with berth.open_store(url, identity=IDENTITY, sealer=sealer) as plain:
        _park(plain, "c", "r3")
    assert berth_("audit", "--json", BERTH_WITNESS=witness_url).exit_code == 1
    adopted = berth_("audit", "--adopt", "--json", BERTH_WITNESS=witness_url)
    doc = json.loads(adopted.stdout)
    assert doc["adopted"] == 1 and doc["unknown"] == [] and doc["missing"] == ["b"], doc
    again = berth_("audit", "--adopt", BERTH_WITNESS=witness_url)
    assert "0 frames adopted by the witness" in again.output, again.output
    # the operator accepts that b is gone: saves over it proceed, the audit is clean
    acked = berth_("audit", "--acknowledge", "b", "--acknowledge", "c", BERTH_WITNESS=witness_url)
    assert acked.exit_code == 0, acked.output
    assert "key 'b': acknowledged gone" in acked.output and "key 'c': not missing" in acked.output
    doc = json.loads(berth_("audit", "--json", BERTH_WITNESS=witness_url).stdout)
    assert doc["ok"] is True and doc["missing"] == [] and doc["unsettled"] == [], doc


def test_adopt_takes_frames_parked_before_the_witness_and_nothing_else(setup: Setup) -> None:
    with berth.open_store(setup.url, identity=IDENTITY, sealer=setup.sealer) as plain:  # no witness yet
        _park(plain, "old/a", "r1")
        _park(plain, "old/b", "r2")
        _park(plain, "old/c", "r3", deadline=datetime.now(timezone.utc) - timedelta(seconds=1))
    before = setup.frame("old/a")
    with setup.store() as store:
        with pytest.raises(berth.IntegrityError, match="never saw"):
            store.load("old/a")
        _park(store, "new", "r4")
        new = setup.frame("new")
        record = setup.witness.get(f"{IDENTITY}:witness/new")
        setup.witness.delete(f"{IDENTITY}:witness/new", record[1])  # the witness lost the key's record
        assert store.audit().unknown == ("new", "old/a", "old/b", "old/c")
        assert store.adopt() == 3  # not "new": it has a sequence number, its record was deleted
        assert store.audit().unknown == ("new",)
        parked = store.load("old/a")
        assert parked is not None and parked.envelope.run_id == "r1"
        assert setup.frame("new") == new  # left as it was
        assert store.adopt() == 0  # once adopted, a frame is witnessed like any other
        assert before is not None
        setup.put_frame("old/a", before)  # the frame as it was before adoption, put back
        with pytest.raises(berth.IntegrityError):
            store.claim("old/a")
        assert "old/a" in store.audit().replayed + store.audit().unknown
        assert store.adopt() == 0  # its key has a record now: never adopted over it
        assert (claimed := store.claim("old/b")) is not None and claimed.run_id == "r2"
        assert store.sweep() == 1  # old/c, expired, adopted and swept like any other


def test_adopt_needs_a_witness(tmp_path: Path) -> None:
    with berth.open_store("memory://", identity=IDENTITY, sealer=berth.AesGcmSealer(berth.Keyring.generate())) as s:
        with pytest.raises(berth.BerthError, match="no witness: open it with witness=URL to adopt it"):
            s.adopt()


def test_a_save_over_a_claimed_frame_put_back_reads_again_and_judges_it(store: berth.Store, setup: Setup) -> None:
    """A save's first read is the record alone (issue 35); the write it implies (here: only if nothing is
    there, as the record says the frame was claimed) fails over a frame put back, and the save reads
    the frame, judges it and goes on as before: a conditional save loses, an unconditional one
    writes over it; no verdict is changed by the candidate the failed write recorded."""
    setup.frames, setup.witness = store.backend, store.frames.records
    _park(store, "a", "r1")
    claimed = setup.frame("a")
    assert claimed is not None and store.claim("a") is not None
    setup.put_frame("a", claimed)  # the claimed run, put back
    with pytest.raises(berth.TokenMismatch):
        store.save("a", make_envelope("r2"), if_absent=True)
    assert store.audit().replayed == ("a",)  # the failed candidate made it no better
    store.save("a", make_envelope("r3"))  # over it, warned about (as before)
    parked = store.load("a")
    assert parked is not None and parked.envelope.run_id == "r3" and store.audit().ok


def test_a_load_hashes_no_frame_the_record_names_at_its_generation(store: berth.Store, setup: Setup) -> None:
    """A load opens the frame (its seal checks every byte): when the record names it landed at this very
    generation its SHA-256 is not computed (issue 35); a frame put back, at another generation, is hashed
    and judged as before, and an audit (which opens nothing) always hashes."""
    setup.frames, setup.witness = store.backend, store.frames.records
    _park(store, "a", "r1")
    older = setup.frame("a")
    _park(store, "a", "r2")
    snap = run(_w(store).load_seen(store.core, "a", False), _targets(store))[1]
    assert snap.verdict == "ok" and snap.info is not None and snap.info.digest is None
    audited = run(_w(store).snapshot(store.core.name("a"), "a"), _targets(store))  # as audit() reads it
    assert audited.verdict == "ok" and audited.info is not None and audited.info.digest is not None
    assert (claimed := store.claim("a")) is not None and claimed.run_id == "r2" and store.audit().ok
    assert older is not None
    setup.put_frame("a", older)
    whole = run(_w(store).snapshot(store.core.name("a"), "a", opening=True), _targets(store))
    assert whole.verdict == "replayed" and whole.info is not None and whole.info.digest is not None
