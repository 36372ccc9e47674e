"""The coordinator's suspend and wake, every branch, on memory, file, SQLite and PostgreSQL.

Failures are injected by wrapping the real backends (`Flaky`); races between
processes run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import berth
from berth._coordinator_core import QUESTION_LABEL
from berth.testing import SECRET, FakeClock, make_envelope
from tests import test_questions as shared
from tests.test_questions import IDENTITY, REPLY, Flaky, assert_clean, flaky, with_query

# The question store's fixtures: storage of every kind, a fake clock, an AES-GCM sealer.
url, backends, clock, sealer = shared.url, shared.backends, shared.clock, shared.sealer

FRESH, REARM, RESUME = berth.WakeDecision.FRESH, berth.WakeDecision.REARM, berth.WakeDecision.RESUME
KEY = "org/repo#42"


@pytest.fixture
def make_coordinator(
    backends: Callable[[], Flaky], clock: FakeClock, sealer: berth.Sealer
) -> Callable[..., berth.Coordinator]:
    """A coordinator over its own handles onto the test's storage (as another process would have)."""

    def make(**kw: Any) -> berth.Coordinator:
        store = berth.Store(backends(), identity=IDENTITY, sealer=sealer, clock=clock)
        questions = berth.QuestionStore(backends(), identity=IDENTITY, sealer=sealer, clock=clock)
        return berth.Coordinator(store, questions, **kw)

    return make


@pytest.fixture
def coordinator(make_coordinator: Callable[..., berth.Coordinator]) -> berth.Coordinator:
    return make_coordinator()


def parked(c: berth.Coordinator, key: str = KEY) -> berth.Envelope | None:
    found = c.store.load(key, allow_expired=True)
    return None if found is None else found.envelope


def raw(c: berth.Coordinator, key: str = KEY) -> tuple[bytes, bytes] | None:
    """The stored bytes of the envelope and the question under `key`, read past every wrapper."""
    env = flaky(c.store).inner.get(f"{IDENTITY}/{key}")
    question = flaky(c.questions).inner.get(f"{IDENTITY}:questions/{key}")  # type: ignore[arg-type]
    return (None if env is None else bytes(env[0]), None if question is None else bytes(question[0]))


def qs(c: berth.Coordinator) -> berth.QuestionStore:
    """The coordinator's question store, which these tests make a `berth.QuestionStore`."""
    assert isinstance(c.questions, berth.QuestionStore)
    return c.questions


def answer(c: berth.Coordinator, text: str = REPLY, key: str = KEY, by: str = "alice") -> berth.Answer:
    pending = c.questions.pending(key)
    assert pending is not None
    return qs(c).provide(key, pending.id, text, by=by)


# --- the happy path ----------------------------------------------------------------------------


def test_fresh_rearm_resume_fresh(coordinator: berth.Coordinator, clock: FakeClock) -> None:
    assert coordinator.wake(KEY) == berth.Wake(FRESH, None, None)

    saved = coordinator.suspend(KEY, make_envelope("run-1"))
    asked = coordinator.questions.pending(KEY)
    assert asked is not None
    assert (asked.key, asked.run_id, asked.prompt, asked.asked_at) == (KEY, "run-1", "Ship it?", clock.now)
    assert saved.labels[QUESTION_LABEL] == asked.id

    before = raw(coordinator)
    wake = coordinator.wake(KEY)
    assert wake == berth.Wake(REARM, None, None) and wake.error is None
    assert raw(coordinator) == before, "a REARM changes nothing"

    clock.advance(timedelta(hours=5))
    given = answer(coordinator)
    wake = coordinator.wake(KEY)
    assert wake.decision is RESUME and wake.error is None
    assert wake.envelope == saved
    assert wake.answer == given == berth.Answer(asked.id, REPLY, "alice", clock.now)
    assert parked(coordinator) is None
    assert coordinator.questions.pending(KEY) is None, "RESUME consumes the question"

    assert coordinator.wake(KEY).decision is FRESH


def test_wake_unpacks_compares_and_pickles(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope())
    answer(coordinator)
    wake = coordinator.wake(KEY)
    decision, envelope, given = wake
    assert decision == "resume" and envelope is not None and given is not None
    assert wake == (RESUME, envelope, given)
    again = pickle.loads(pickle.dumps(wake))
    assert again == wake and again.reason == "claimed" and again.error is None
    assert SECRET not in repr(wake) and REPLY not in repr(wake)


def test_suspend_stamps_the_default_deadline_and_keeps_an_explicit_one(
    make_coordinator: Callable[..., berth.Coordinator], clock: FakeClock
) -> None:
    coordinator = make_coordinator()
    saved = coordinator.suspend("a", make_envelope())
    assert saved.deadline == clock.now + timedelta(days=14)
    assert saved.created_at == clock.now
    assert parked(coordinator, "a") == saved

    explicit = clock.now + timedelta(hours=1)
    assert coordinator.suspend("b", make_envelope(deadline=explicit)).deadline == explicit

    short = make_coordinator(default_deadline=timedelta(minutes=5))
    assert short.suspend("c", make_envelope()).deadline == clock.now + timedelta(minutes=5)


def test_the_prompt(coordinator: berth.Coordinator) -> None:
    coordinator.suspend("given", make_envelope(), question="Merge into main?")
    assert coordinator.questions.pending("given").prompt == "Merge into main?"

    calls = [berth.PendingCall("c0", "lookup", {"q": 1}), berth.PendingCall("c1", "ask", {"question": "Refund?"})]
    coordinator.suspend("from-call", make_envelope(pending_calls=calls))
    assert coordinator.questions.pending("from-call").prompt == "Refund?"

    coordinator.suspend("fallback", make_envelope("run-9", pending_calls=[], reason="needs approval"))
    prompt = coordinator.questions.pending("fallback").prompt
    assert "run-9" in prompt and "needs approval" in prompt


def test_resuspending_supersedes_the_question(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope("run-1"))
    old = coordinator.questions.pending(KEY)
    coordinator.suspend(KEY, make_envelope("run-2"))
    new = coordinator.questions.pending(KEY)
    assert old is not None and new is not None and new.id != old.id and new.run_id == "run-2"
    with pytest.raises(berth.AnswerRefused):
        coordinator.questions.provide(KEY, old.id, "yes", by="alice")  # type: ignore[attr-defined]
    assert coordinator.wake(KEY).decision is REARM
    answer(coordinator)
    wake = coordinator.wake(KEY)
    assert wake.decision is RESUME and wake.envelope.run_id == "run-2"


# --- duplicate wakers --------------------------------------------------------------------------


def test_duplicate_wakers_one_resume_the_other_rearm_then_fresh(
    make_coordinator: Callable[..., berth.Coordinator],
) -> None:
    first, second = make_coordinator(), make_coordinator()
    first.suspend(KEY, make_envelope())
    answer(first)
    won: list[berth.Wake] = []
    # `second` has loaded the envelope and read the answer; `first` resumes before its delete.
    flaky(second.store).before["delete"] = lambda name: won.append(first.wake(KEY))
    lost = second.wake(KEY)
    assert won[0].decision is RESUME
    assert lost == berth.Wake(REARM, None, None) and lost.reason == "another waker won" and lost.error is None
    assert second.wake(KEY).decision is FRESH
    assert first.questions.pending(KEY) is None


def test_many_wakers_in_threads(make_coordinator: Callable[..., berth.Coordinator]) -> None:
    wakers = [make_coordinator() for _ in range(6)]
    keys = [f"t/{i}" for i in range(20)]
    for key in keys:
        wakers[0].suspend(key, make_envelope(key))
        answer(wakers[0], key=key)
    barrier = threading.Barrier(len(wakers))

    def run(c: berth.Coordinator) -> list[tuple[str, berth.WakeDecision]]:
        barrier.wait()
        return [(key, c.wake(key).decision) for key in keys]

    with ThreadPoolExecutor(len(wakers)) as pool:
        outcomes = [o for result in pool.map(run, wakers) for o in result]
    for key in keys:
        decisions = [d for k, d in outcomes if k == key]
        assert decisions.count(RESUME) == 1, (key, decisions)
        assert set(decisions) <= {RESUME, REARM, FRESH}
    assert [w.wake(k).decision for w in wakers for k in keys] == [FRESH] * len(wakers) * len(keys)


# --- dead runs: expiry and drift ----------------------------------------------------------------


def test_expiry_inside_and_after_the_default_window(coordinator: berth.Coordinator, clock: FakeClock) -> None:
    saved = coordinator.suspend(KEY, make_envelope())
    clock.advance(timedelta(days=13, hours=23))
    assert coordinator.wake(KEY).decision is REARM
    clock.advance(timedelta(hours=1))  # exactly at the deadline: not yet past it
    assert clock.now == saved.deadline
    assert coordinator.wake(KEY).decision is REARM
    clock.advance(timedelta(microseconds=1))
    wake = coordinator.wake(KEY)
    assert wake == berth.Wake(FRESH, None, None) and wake.reason == "expired"
    assert parked(coordinator) is None
    assert coordinator.questions.pending(KEY) is None


def test_an_answered_run_past_its_deadline_never_resumes(coordinator: berth.Coordinator, clock: FakeClock) -> None:
    coordinator.suspend(KEY, make_envelope(deadline=clock.now + timedelta(hours=1)))
    answer(coordinator)
    clock.advance(timedelta(hours=1, seconds=1))
    wake = coordinator.wake(KEY)
    assert wake.decision is FRESH and wake.envelope is None and wake.answer is None
    assert parked(coordinator) is None and coordinator.questions.pending(KEY) is None


def test_a_deadline_passing_during_a_slow_wake_never_resumes(
    coordinator: berth.Coordinator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 12.3: wake checked the deadline, then read the answer (slowly), then deleted
    coordinator.suspend(KEY, make_envelope(deadline=clock.now + timedelta(seconds=1)))
    answer(coordinator)
    lookup = coordinator.questions.answer

    def slow_answer(key: str) -> berth.Answer | None:
        clock.advance(timedelta(seconds=2))  # a slow question store: the deadline passes meanwhile
        return lookup(key)

    monkeypatch.setattr(coordinator.questions, "answer", slow_answer)
    wake = coordinator.wake(KEY)
    assert wake.decision is FRESH and wake.envelope is None and wake.answer is None
    assert parked(coordinator) is None, "removed, as a dead run is"


def test_answered_at_the_deadline_still_resumes(coordinator: berth.Coordinator, clock: FakeClock) -> None:
    coordinator.suspend(KEY, make_envelope(deadline=clock.now + timedelta(hours=1)))
    clock.advance(timedelta(hours=1))
    answer(coordinator)
    assert coordinator.wake(KEY).decision is RESUME


def test_drift_via_validate(make_coordinator: Callable[..., berth.Coordinator]) -> None:
    old_config = make_coordinator()
    old_config.suspend(KEY, make_envelope())
    answer(old_config)

    def validate(env: berth.Envelope) -> None:
        berth.check_resumable(env, provider="anthropic", model="claude-next", config_digest=env.config_digest)

    new_config = make_coordinator(validate=validate)
    wake = new_config.wake(KEY)
    assert wake == berth.Wake(FRESH, None, None) and wake.reason == "drifted"
    assert parked(new_config) is None and new_config.questions.pending(KEY) is None


def test_validate_that_passes_resumes(make_coordinator: Callable[..., berth.Coordinator]) -> None:
    seen: list[str] = []
    coordinator = make_coordinator(validate=lambda env: seen.append(env.run_id))
    coordinator.suspend(KEY, make_envelope("run-7"))
    assert coordinator.wake(KEY).decision is REARM
    answer(coordinator)
    assert coordinator.wake(KEY).decision is RESUME
    assert seen == ["run-7", "run-7"]


def test_validate_failing_otherwise_rearms(make_coordinator: Callable[..., berth.Coordinator]) -> None:
    def broken(env: berth.Envelope) -> None:
        raise berth.BackendError("the config service is down")

    coordinator = make_coordinator(validate=broken)
    coordinator.suspend(KEY, make_envelope())
    answer(coordinator)
    wake = coordinator.wake(KEY)
    assert wake.decision is REARM and isinstance(wake.error, berth.BackendError)
    assert parked(coordinator) is not None


def test_a_dead_run_removed_by_another_waker_is_still_fresh(
    make_coordinator: Callable[..., berth.Coordinator], clock: FakeClock
) -> None:
    first, second = make_coordinator(), make_coordinator()
    first.suspend(KEY, make_envelope(deadline=clock.now + timedelta(hours=1)))
    clock.advance(timedelta(hours=2))
    swept: list[berth.Wake] = []
    flaky(second.store).before["delete"] = lambda name: swept.append(first.wake(KEY))
    wake = second.wake(KEY)
    assert swept[0].decision is FRESH and swept[0].reason == "expired"
    assert wake.decision is FRESH and "another waker" in wake.reason
    assert first.questions.pending(KEY) is None


def test_store_sweep_then_wake_is_fresh(coordinator: berth.Coordinator, clock: FakeClock) -> None:
    coordinator.suspend(KEY, make_envelope(deadline=clock.now + timedelta(hours=1)))
    clock.advance(timedelta(hours=2))
    assert coordinator.store.sweep() == 1
    assert coordinator.wake(KEY).decision is FRESH
    assert coordinator.questions.sweep() == 1  # type: ignore[attr-defined]


# --- failures: the right decision, and the envelope still parked -----------------------------------


def test_load_failure_rearms_with_the_error(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope())
    answer(coordinator)
    flaky(coordinator.store).fail.add("get")
    wake = coordinator.wake(KEY)
    assert wake == berth.Wake(REARM, None, None)
    assert isinstance(wake.error, berth.BackendError) and wake.reason == "load failed"
    assert_clean(wake.error, KEY)
    flaky(coordinator.store).fail.clear()
    assert parked(coordinator) is not None
    assert coordinator.wake(KEY).decision is RESUME


def test_tampered_envelope_rearms_with_an_integrity_error(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope())
    inner = flaky(coordinator.store).inner
    data = bytearray(inner.get(f"{IDENTITY}/{KEY}")[0])
    data[-1] ^= 1
    inner.put(f"{IDENTITY}/{KEY}", bytes(data))
    wake = coordinator.wake(KEY)
    assert wake.decision is REARM and isinstance(wake.error, berth.IntegrityError)
    assert inner.get(f"{IDENTITY}/{KEY}") is not None


def test_answer_failure_rearms_with_the_error(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope())
    answer(coordinator)
    flaky(coordinator.questions).fail.add("get")  # type: ignore[arg-type]
    wake = coordinator.wake(KEY)
    assert wake.decision is REARM and isinstance(wake.error, berth.BackendError)
    assert wake.reason == "answer lookup failed"
    assert parked(coordinator) is not None
    flaky(coordinator.questions).fail.clear()  # type: ignore[arg-type]
    assert coordinator.wake(KEY).decision is RESUME


def test_claim_failure_rearms_and_leaves_everything(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope())
    given = answer(coordinator)
    flaky(coordinator.store).fail.add("delete")
    wake = coordinator.wake(KEY)
    assert wake == berth.Wake(REARM, None, None)
    assert isinstance(wake.error, berth.BackendError) and wake.reason == "claim failed"
    assert parked(coordinator) is not None
    assert coordinator.questions.answer(KEY) == given, "nothing consumed"
    flaky(coordinator.store).fail.clear()
    assert coordinator.wake(KEY).decision is RESUME


def test_sweep_failure_rearms_and_leaves_the_dead_run_parked(coordinator: berth.Coordinator, clock: FakeClock) -> None:
    coordinator.suspend(KEY, make_envelope(deadline=clock.now + timedelta(hours=1)))
    clock.advance(timedelta(hours=2))
    flaky(coordinator.store).fail.add("delete")
    wake = coordinator.wake(KEY)
    assert wake.decision is REARM and isinstance(wake.error, berth.BackendError)
    assert "expired" in wake.reason
    assert parked(coordinator) is not None and coordinator.questions.pending(KEY) is not None
    flaky(coordinator.store).fail.clear()
    assert coordinator.wake(KEY).decision is FRESH
    assert parked(coordinator) is None and coordinator.questions.pending(KEY) is None


def test_consume_failure_after_the_claim_is_logged_not_raised(
    coordinator: berth.Coordinator, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator.suspend(KEY, make_envelope())
    given = answer(coordinator)
    flaky(coordinator.questions).fail.add("delete")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="berth"):
        wake = coordinator.wake(KEY)
    assert wake.decision is RESUME and wake.answer == given and wake.error is None
    assert any("could not consume" in r.getMessage() for r in caplog.records)
    assert parked(coordinator) is None
    assert coordinator.wake(KEY).decision is FRESH


def test_a_leftover_answer_never_resumes_a_later_run(coordinator: berth.Coordinator) -> None:
    coordinator.suspend(KEY, make_envelope("run-1"))
    answer(coordinator, "yes to run 1")
    flaky(coordinator.questions).fail.add("delete")  # type: ignore[arg-type]
    assert coordinator.wake(KEY).decision is RESUME  # run 1's question is left behind, answered
    flaky(coordinator.questions).fail = {"put"}  # type: ignore[arg-type]
    with pytest.raises(berth.BackendError):
        coordinator.suspend(KEY, make_envelope("run-2"))  # parked, but its question was never asked
    flaky(coordinator.questions).fail.clear()  # type: ignore[arg-type]
    assert coordinator.questions.answer(KEY).text == "yes to run 1"
    wake = coordinator.wake(KEY)
    assert wake.decision is REARM and wake.reason == "answer is to another question"
    assert parked(coordinator).run_id == "run-2"


def test_ask_failure_after_the_save_leaves_the_run_parked_until_its_deadline(
    coordinator: berth.Coordinator, clock: FakeClock
) -> None:
    flaky(coordinator.questions).fail.add("put")  # type: ignore[arg-type]
    with pytest.raises(berth.BackendError) as info:
        coordinator.suspend(KEY, make_envelope())
    assert_clean(info.value, KEY)
    flaky(coordinator.questions).fail.clear()  # type: ignore[arg-type]
    assert parked(coordinator) is not None and coordinator.questions.pending(KEY) is None
    for _ in range(3):
        clock.advance(timedelta(days=4))
        assert coordinator.wake(KEY).decision is REARM
    clock.advance(timedelta(days=3))
    assert coordinator.wake(KEY).decision is FRESH
    assert parked(coordinator) is None


def test_save_failure_asks_nothing(coordinator: berth.Coordinator) -> None:
    flaky(coordinator.store).fail.add("put")
    with pytest.raises(berth.BackendError):
        coordinator.suspend(KEY, make_envelope())
    assert flaky(coordinator.questions).calls == []  # type: ignore[arg-type]


# --- refusals -----------------------------------------------------------------------------------


def test_negative_default_deadline_is_refused_before_any_io(
    make_coordinator: Callable[..., berth.Coordinator],
) -> None:
    coordinator = make_coordinator(default_deadline=timedelta(seconds=-1))
    with pytest.raises(berth.InvalidEnvelope, match="negative") as info:
        coordinator.suspend(KEY, make_envelope())
    assert_clean(info.value, KEY)
    assert flaky(coordinator.store).calls == [] and flaky(coordinator.questions).calls == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: make_envelope(version=2), id="version"),
        pytest.param(lambda: make_envelope(remaining_turns=-1), id="negative-turns"),
        pytest.param(lambda: make_envelope(pending_calls=[berth.PendingCall("", "ask")]), id="call-without-id"),
        pytest.param(lambda: make_envelope(labels={f"l{i}": "v" for i in range(64)}), id="no-room-for-label"),
        pytest.param(lambda: {"provider_state": {}}, id="not-an-envelope"),
    ],
)
def test_invalid_envelopes_are_refused_before_any_io(coordinator: berth.Coordinator, bad: Callable[[], Any]) -> None:
    with pytest.raises(berth.InvalidEnvelope) as info:
        coordinator.suspend(KEY, bad())
    assert_clean(info.value, KEY)
    assert flaky(coordinator.store).calls == [] and flaky(coordinator.questions).calls == []  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "nul\x00"])
def test_bad_keys_are_refused_before_any_io(coordinator: berth.Coordinator, key: str) -> None:
    with pytest.raises(berth.InvalidKey):
        coordinator.suspend(key, make_envelope())
    with pytest.raises(berth.InvalidKey):
        coordinator.wake(key)
    assert flaky(coordinator.store).calls == [] and flaky(coordinator.questions).calls == []  # type: ignore[arg-type]


def test_non_timedelta_default_deadline_is_a_type_error(coordinator: berth.Coordinator) -> None:
    with pytest.raises(TypeError):
        berth.Coordinator(coordinator.store, coordinator.questions, default_deadline=14)  # type: ignore[arg-type]


# --- envelopes parked without the coordinator --------------------------------------------------


def test_an_envelope_parked_by_hand_resumes_with_its_question(coordinator: berth.Coordinator) -> None:
    coordinator.store.save(KEY, make_envelope("run-1"))
    asked = qs(coordinator).ask(KEY, "q?", run_id="run-1")
    assert coordinator.wake(KEY).decision is REARM
    qs(coordinator).provide(KEY, asked.id, "yes", by="alice")
    wake = coordinator.wake(KEY)
    assert wake.decision is RESUME and wake.answer.question_id == asked.id
    assert coordinator.questions.pending(KEY) is None


def test_a_dead_envelope_parked_by_hand_consumes_only_its_own_runs_question(
    coordinator: berth.Coordinator, clock: FakeClock
) -> None:
    coordinator.store.save("mine", make_envelope("run-1", deadline=clock.now))
    qs(coordinator).ask("mine", "q?", run_id="run-1")
    coordinator.store.save("other", make_envelope("run-1", deadline=clock.now))
    other = qs(coordinator).ask("other", "q?", run_id="run-2")
    clock.advance(timedelta(seconds=1))
    assert coordinator.wake("mine").decision is FRESH
    assert coordinator.wake("other").decision is FRESH
    assert coordinator.questions.pending("mine") is None
    assert coordinator.questions.pending("other") == other


def test_the_clock_defaults_to_the_stores(backends: Callable[[], Flaky], sealer: berth.Sealer) -> None:
    clock = FakeClock()
    store = berth.Store(backends(), identity=IDENTITY, sealer=sealer, clock=clock)
    questions = berth.QuestionStore(backends(), identity=IDENTITY, sealer=sealer, clock=clock)
    coordinator = berth.Coordinator(store, questions)
    assert coordinator.suspend(KEY, make_envelope()).deadline == clock.now + timedelta(days=14)
    clock.advance(timedelta(days=15))
    assert coordinator.wake(KEY).decision is FRESH


# --- the wake race between processes -------------------------------------------------------------

RACE_KEYS = 250
RACE_ROUNDS = 4
RACE_WORKERS = 4


def _race_worker(url: str, sealer: berth.Sealer, inbox: Any, outbox: Any, start: Any) -> None:
    store = berth.open_store(url, identity=IDENTITY, sealer=sealer)
    questions = berth.open_questions(url, identity=IDENTITY, sealer=sealer)
    coordinator = berth.Coordinator(store, questions)
    outbox.put("ready")
    while (job := inbox.get()) is not None:
        keys = job
        results = []
        start.wait()  # every worker starts the round together
        for key in keys:
            wake = coordinator.wake(key)
            results.append((key, wake.decision.value, None if wake.error is None else str(wake.error)))
        outbox.put(results)
    store.close()
    questions.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def race_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/race.db?synchronous=NORMAL"  # the race is about CAS, not fsync
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = f"berth_r_{uuid.uuid4().hex[:12]}"
    # Commits need not wait for the disk here: the race is about the conditional delete, not durability.
    yield with_query(dsn, schema=schema, pool_max_size="2", options="-csynchronous_commit%3Doff")
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_wake_race_between_processes_never_resumes_twice(race_url: str) -> None:
    """RACE_ROUNDS x RACE_KEYS parked, answered runs, each woken by RACE_WORKERS processes at once."""
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    store = berth.open_store(race_url, identity=IDENTITY, sealer=sealer)
    questions = berth.open_questions(race_url, identity=IDENTITY, sealer=sealer)
    coordinator = berth.Coordinator(store, questions)
    ctx = multiprocessing.get_context("spawn")
    inboxes = [ctx.Queue() for _ in range(RACE_WORKERS)]
    outbox = ctx.Queue()
    start = ctx.Barrier(RACE_WORKERS)
    procs = [ctx.Process(target=_race_worker, args=(race_url, sealer, inbox, outbox, start)) for inbox in inboxes]
    for p in procs:
        p.start()
    try:
        assert [outbox.get(timeout=120) for _ in procs] == ["ready"] * len(procs)
        races = wakes = lost = 0
        racing = 0.0
        for round_ in range(RACE_ROUNDS):
            keys = [f"race/{i}" for i in range(RACE_KEYS)]  # the same keys, re-parked every round
            for key in keys:
                coordinator.suspend(key, make_envelope(f"run-{round_}-{key}"))
                answer(coordinator, f"go {round_}", key=key)
            started = time.perf_counter()
            for i, inbox in enumerate(inboxes):
                inbox.put(keys if (i + round_) % 3 else keys[::-1])  # mostly the same order: the most contention
            results = [r for _ in procs for r in outbox.get(timeout=600)]
            racing += time.perf_counter() - started
            assert [r for r in results if r[2] is not None] == [], "no wake may fail"
            lost += sum(1 for _, d, _ in results if d == "rearm")
            for key in keys:
                decisions = [d for k, d, _ in results if k == key]
                assert decisions.count("resume") == 1, (round_, key, decisions)
                assert set(decisions) <= {"resume", "rearm", "fresh"}
            assert list(store.list("race/")) == []
            assert list(questions.list("race/")) == [], "every resumed run's question is consumed"
            races += len(keys)
            wakes += len(results)
        assert races >= 1000
        print(
            f"\n{race_url.split(':')[0]}: {races} races, {wakes} wakes by {RACE_WORKERS} processes "
            f"in {racing:.2f}s ({wakes / racing:.0f} wakes/s); {lost} lost a claim they had loaded; never two RESUMEs"
        )
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for p in procs:
            p.join(timeout=60)
        store.close()
        questions.close()
    assert [p.exitcode for p in procs] == [0] * len(procs)


class OwnQuestions:
    """A host's own question store (think pull-request comments): just the protocol's four methods."""

    def __init__(self) -> None:
        self.asked: dict[str, berth.Question] = {}
        self.answers: dict[str, berth.Answer] = {}
        self.deadlines: dict[str, datetime | None] = {}

    def ask(
        self, key: str, prompt: str, *, run_id: str, question_id: str, deadline: datetime | None = None
    ) -> berth.Question:
        self.deadlines[key] = deadline
        self.asked[key] = berth.Question(question_id, key, run_id, prompt, datetime.now(timezone.utc))
        self.answers.pop(key, None)
        return self.asked[key]

    def pending(self, key: str) -> berth.Question | None:
        return self.asked.get(key)

    def answer(self, key: str) -> berth.Answer | None:
        return self.answers.get(key)

    def consume(self, key: str, question_id: str) -> bool:
        if key in self.asked and self.asked[key].id == question_id:
            del self.asked[key]
            self.answers.pop(key, None)
            return True
        return False


def test_a_question_store_of_the_hosts_own(backends: Callable[[], Flaky], clock: FakeClock) -> None:
    own = OwnQuestions()
    store = berth.Store(backends(), identity=IDENTITY, sealer=berth.PlaintextSealer(), clock=clock)
    coordinator = berth.Coordinator(store, own)
    parked = coordinator.suspend(KEY, make_envelope(), question="")  # empty: the pending call's question is asked
    asked = own.asked[KEY]
    assert asked.prompt == "Ship it?"
    assert own.deadlines[KEY] == parked.deadline is not None, "the protocol hands the run's deadline"
    assert coordinator.wake(KEY).decision is REARM
    own.answers[KEY] = berth.Answer(asked.id, "yes", "alice", clock.now)
    wake = coordinator.wake(KEY)
    assert wake.decision is RESUME and wake.answer is not None and wake.answer.text == "yes"
    assert own.asked == {}


def test_a_hosts_question_store_failing_its_own_way_rearms(backends: Callable[[], Flaky], clock: FakeClock) -> None:
    class Down(OwnQuestions):
        def answer(self, key: str) -> berth.Answer | None:
            raise TimeoutError("the comments API timed out")

    store = berth.Store(backends(), identity=IDENTITY, sealer=berth.PlaintextSealer(), clock=clock)
    coordinator = berth.Coordinator(store, Down())
    coordinator.suspend(KEY, make_envelope())
    wake = coordinator.wake(KEY)
    assert wake.decision is REARM and isinstance(wake.error, berth.BackendError)
    assert isinstance(wake.error.__cause__, TimeoutError) and KEY in str(wake.error)
    assert parked(coordinator) is not None


def test_the_sync_and_async_coordinators_are_twins() -> None:
    # The hand-written twins had drifted (issue 33): the async coordinator had no `validate`, read
    # `default_deadline` only, held a whole sync Coordinator for its plans, and its repr left out the
    # deadline. Both now hold a CoordinatorCore; the sync one is generated from the async one.
    import berth.aio

    def face(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    assert face(berth.aio.AsyncCoordinator) == face(berth.Coordinator) == {
        "default_deadline", "identity", "suspend", "validate", "wake"
    }  # fmt: skip
    assert berth.aio.Coordinator is berth.aio.AsyncCoordinator  # the first name, the same class

    def check(envelope: berth.Envelope) -> None:
        raise berth.ConfigDrift("drifted")

    url = f"memory://twins-{uuid.uuid4().hex}"
    plain = berth.PlaintextSealer()
    sync = berth.Coordinator(
        berth.open_store(url, identity=IDENTITY, sealer=plain),
        berth.open_questions(url, identity=IDENTITY, sealer=plain),
        default_deadline=timedelta(hours=1),
        validate=check,
    )
    awaited = berth.aio.AsyncCoordinator(
        berth.aio.open_store(url, identity=IDENTITY, sealer=plain),
        berth.aio.open_questions(url, identity=IDENTITY, sealer=plain),
        default_deadline=timedelta(hours=1),
        validate=check,
    )
    for coordinator in (sync, awaited):
        assert coordinator.validate is check and coordinator.default_deadline == timedelta(hours=1)
        assert coordinator.identity == IDENTITY
        assert repr(coordinator).endswith("default_deadline=datetime.timedelta(seconds=3600))")
        assert not isinstance(vars(coordinator).get("core"), berth.Coordinator)  # a core, never the sync shell
        coordinator.default_deadline = timedelta(hours=2)
        assert coordinator.core.default_deadline == timedelta(hours=2)
    with pytest.raises(TypeError, match="default_deadline must be a timedelta"):
        berth.aio.AsyncCoordinator(awaited.store, awaited.questions, default_deadline=3600)  # type: ignore[arg-type]
