"""The question store on every embedded backend and PostgreSQL: ask, pending, answer, provide, consume."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

import berth
import berth.aio
from berth._token import Token
from berth.backends import Backend, Data, open_backend
from berth.testing import SECRET, FakeClock, make_envelope

IDENTITY = "agent"
PROMPT = f"May I refund the customer? {SECRET}"
REPLY = f"yes, refund {SECRET}"

BACKENDS = ["memory", "file", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


class Flaky(Backend):
    """Wraps a backend: an operation named in `fail` raises; a hook in `before` runs once before its operation.

    Operations: get, put (unconditional), put_if_match, put_if_absent, delete, scan.
    """

    def __init__(self, inner: Backend):
        self.inner = inner
        self.fail: set[str] = set()
        self.before: dict[str, Callable[[str], None]] = {}
        self.calls: list[str] = []

    def _enter(self, op: str, name: str) -> None:
        self.calls.append(op)
        hook = self.before.pop(op, None)
        if hook is not None:
            hook(name)
        if op in self.fail:
            raise ConnectionError(f"injected {op} failure")

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        op = "put_if_match" if if_match is not None else "put_if_absent" if if_absent else "put"
        self._enter(op, name)
        token: Token = self.inner.put(name, data, if_match=if_match, if_absent=if_absent)
        return token

    def get(self, name: str) -> tuple[Data, Token] | None:
        self._enter("get", name)
        found: tuple[Data, Token] | None = self.inner.get(name)
        return found

    def delete(self, name: str, token: Token) -> None:
        self._enter("delete", name)
        self.inner.delete(name, token)

    def scan(self, prefix: str) -> Iterator[str]:
        self._enter("scan", prefix)
        names: Iterator[str] = self.inner.scan(prefix)
        return names

    def close(self) -> None:
        self.inner.close()


def with_query(url: str, **params: str) -> str:
    """`url` with `params` appended to its query string."""
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A URL naming fresh, empty storage of each backend kind (the same storage on every open)."""
    kind = request.param
    if kind == "memory":
        yield f"memory://q-{uuid.uuid4().hex}"
    elif kind == "file":
        yield f"file://{tmp_path}/frames"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/berth.db"
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = f"berth_q_{uuid.uuid4().hex[:12]}"
        yield with_query(dsn, schema=schema, pool_max_size="4")
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sealer() -> berth.Sealer:
    return berth.AesGcmSealer(berth.Keyring.generate())


@pytest.fixture
def backends(url: str) -> Iterator[Callable[[], Flaky]]:
    """Opens a new handle onto the test's storage, wrapped in `Flaky`; closes them all afterwards."""
    opened: list[Flaky] = []

    def make() -> Flaky:
        backend = Flaky(open_backend(url))
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


@pytest.fixture
def make_questions(
    backends: Callable[[], Flaky], clock: FakeClock, sealer: berth.Sealer
) -> Callable[..., berth.QuestionStore]:
    def make(**kw: Any) -> berth.QuestionStore:
        kw.setdefault("identity", IDENTITY)
        kw.setdefault("sealer", sealer)
        kw.setdefault("clock", clock)
        return berth.QuestionStore(kw.pop("backend", None) or backends(), **kw)

    return make


@pytest.fixture
def questions(make_questions: Callable[..., berth.QuestionStore]) -> berth.QuestionStore:
    return make_questions()


def flaky(store: berth.QuestionStore | berth.Store) -> Flaky:
    backend = store.backend
    assert isinstance(backend, Flaky)
    return backend


def assert_clean(exc: BaseException, key: str) -> None:
    """The error names the key and leaks neither the prompt nor the answer."""
    text = str(exc)
    assert SECRET not in text
    assert repr(key) in text, text


# --- the protocol --------------------------------------------------------------------------


def test_nothing_asked(questions: berth.QuestionStore) -> None:
    assert questions.pending("k") is None
    assert questions.answer("k") is None
    assert questions.consume("k", "nope") is False


def test_ask_provide_consume(questions: berth.QuestionStore, clock: FakeClock) -> None:
    asked = questions.ask("org/repo#42", PROMPT, run_id="run-1")
    assert asked == berth.Question(asked.id, "org/repo#42", "run-1", PROMPT, clock.now)
    assert len(asked.id) == 32 and int(asked.id, 16) >= 0  # 128 random bits, hex
    assert questions.pending("org/repo#42") == asked
    assert questions.answer("org/repo#42") is None

    clock.advance(timedelta(hours=3))
    given = questions.provide("org/repo#42", asked.id, REPLY, by="alice")
    assert given == berth.Answer(asked.id, REPLY, "alice", clock.now)
    assert questions.answer("org/repo#42") == given
    assert questions.pending("org/repo#42") == asked  # pending until consumed

    assert questions.consume("org/repo#42", asked.id) is True
    assert questions.pending("org/repo#42") is None
    assert questions.answer("org/repo#42") is None
    assert questions.consume("org/repo#42", asked.id) is False


def test_explicit_question_id(questions: berth.QuestionStore) -> None:
    asked = questions.ask("k", "q?", question_id="q-1")
    assert asked.id == "q-1" == questions.pending("k").id


def test_fresh_ids_are_random(questions: berth.QuestionStore) -> None:
    ids = {questions.ask("k", "q?").id for _ in range(20)}
    assert len(ids) == 20


def test_a_new_ask_supersedes_and_drops_the_old_answer(questions: berth.QuestionStore) -> None:
    first = questions.ask("k", "first?")
    questions.provide("k", first.id, "yes", by="alice")
    second = questions.ask("k", "second?")
    assert questions.pending("k") == second
    assert questions.answer("k") is None


def test_answer_to_a_superseded_question_is_refused(questions: berth.QuestionStore) -> None:
    old = questions.ask("k", PROMPT, run_id="run-1")
    new = questions.ask("k", PROMPT, run_id="run-2")
    with pytest.raises(berth.AnswerRefused) as info:
        questions.provide("k", old.id, REPLY, by="alice")
    assert isinstance(info.value, berth.TokenMismatch) and isinstance(info.value, berth.BerthError)
    assert (info.value.question_id, info.value.pending_id) == (old.id, new.id)
    assert info.value.key == "k" and "superseded" in str(info.value)
    assert_clean(info.value, "k")
    assert questions.answer("k") is None  # nothing attached to the new question


def test_answer_when_nothing_is_pending_is_refused(questions: berth.QuestionStore) -> None:
    with pytest.raises(berth.AnswerRefused) as info:
        questions.provide("k", "never-asked", "yes", by="alice")
    assert info.value.pending_id is None
    asked = questions.ask("k", "q?")
    questions.consume("k", asked.id)
    with pytest.raises(berth.AnswerRefused, match="consumed or never asked"):
        questions.provide("k", asked.id, "yes", by="alice")


def test_first_answer_wins_and_a_repeat_is_idempotent(questions: berth.QuestionStore, clock: FakeClock) -> None:
    asked = questions.ask("k", PROMPT)
    first = questions.provide("k", asked.id, REPLY, by="alice")
    clock.advance(timedelta(minutes=1))
    assert questions.provide("k", asked.id, REPLY, by="alice") == first  # a retry: same answer, same time
    with pytest.raises(berth.AnswerRefused, match="already answered by 'alice'") as info:
        questions.provide("k", asked.id, "no", by="bob")
    assert_clean(info.value, "k")
    assert questions.answer("k") == first


def test_consume_leaves_a_newer_question_alone(questions: berth.QuestionStore) -> None:
    old = questions.ask("k", "old?")
    new = questions.ask("k", "new?")
    assert questions.consume("k", old.id) is False
    assert questions.pending("k") == new


def test_keys_are_independent(questions: berth.QuestionStore) -> None:
    a = questions.ask("a", "qa")
    b = questions.ask("a/b", "qb")
    questions.provide("a", a.id, "ya", by="x")
    assert questions.answer("a/b") is None
    assert questions.pending("a/b") == b
    questions.consume("a", a.id)
    assert questions.pending("a/b") == b


def test_list(questions: berth.QuestionStore) -> None:
    one = questions.ask("team/1", "q1", run_id="r1")
    two = questions.ask("team/2", "q2", run_id="r2")
    questions.ask("other/3", "q3")
    given = questions.provide("team/2", two.id, "ok", by="bob")
    listed = sorted(questions.list("team/"), key=lambda item: item[0].key)  # order is the backend's
    assert listed == [(one, None), (two, given)]
    assert len(list(questions.list())) == 3


def test_sweep_removes_questions_past_their_runs_deadline(questions: berth.QuestionStore, clock: FakeClock) -> None:
    questions.ask("short", "q", deadline=clock.now + timedelta(hours=1))
    questions.ask("long", "q", deadline=clock.now + timedelta(days=1))
    questions.ask("forever", "q")
    clock.advance(timedelta(hours=2))
    assert questions.sweep() == 1
    assert questions.pending("short") is None
    assert questions.pending("long") is not None and questions.pending("forever") is not None


def test_an_answer_keeps_the_deadline(questions: berth.QuestionStore, clock: FakeClock) -> None:
    asked = questions.ask("k", "q", deadline=clock.now + timedelta(hours=1))
    questions.provide("k", asked.id, "a", by="x")
    clock.advance(timedelta(hours=2))
    assert questions.sweep() == 1


# --- compare-and-swap under races ------------------------------------------------------------


def test_provide_racing_a_new_ask_is_refused(make_questions: Callable[..., berth.QuestionStore]) -> None:
    human, agent = make_questions(), make_questions()
    old = agent.ask("k", "old?")
    newer: list[berth.Question] = []
    # The new question lands between the human's read and the human's conditional write.
    flaky(human).before["put_if_match"] = lambda name: newer.append(agent.ask("k", "new?"))
    with pytest.raises(berth.AnswerRefused) as info:
        human.provide("k", old.id, "yes", by="alice")
    assert info.value.pending_id == newer[0].id
    assert agent.pending("k") == newer[0]
    assert agent.answer("k") is None


def test_consume_racing_an_answer_still_consumes(make_questions: Callable[..., berth.QuestionStore]) -> None:
    waker, human = make_questions(), make_questions()
    asked = waker.ask("k", "q?")

    def answer_first(name: str) -> None:
        human.provide("k", asked.id, "yes", by="alice")

    flaky(waker).before["delete"] = answer_first
    assert waker.consume("k", asked.id) is True
    assert waker.pending("k") is None


def test_consume_racing_a_new_ask_keeps_the_new_question(
    make_questions: Callable[..., berth.QuestionStore],
) -> None:
    waker, agent = make_questions(), make_questions()
    old = agent.ask("k", "old?")
    newer: list[berth.Question] = []
    flaky(waker).before["delete"] = lambda name: newer.append(agent.ask("k", "new?"))
    assert waker.consume("k", old.id) is False
    assert waker.pending("k") == newer[0]


def test_concurrent_answers_exactly_one_wins(make_questions: Callable[..., berth.QuestionStore]) -> None:
    stores = [make_questions() for _ in range(6)]
    asked = stores[0].ask("k", "q?")
    barrier = threading.Barrier(len(stores))

    def answer(i: int) -> str:
        barrier.wait()
        try:
            stores[i].provide("k", asked.id, f"answer {i}", by=f"human-{i}")
        except berth.AnswerRefused:
            return "refused"
        return "stored"

    with ThreadPoolExecutor(len(stores)) as pool:
        outcomes = list(pool.map(answer, range(len(stores))))
    assert outcomes.count("stored") == 1, outcomes
    stored = stores[0].answer("k")
    assert stored is not None and stored.text == f"answer {outcomes.index('stored')}"


# --- namespace, sealing, validation -------------------------------------------------------------


def test_questions_and_envelopes_never_collide(
    backends: Callable[[], Flaky], sealer: berth.Sealer, clock: FakeClock
) -> None:
    backend = backends()
    store = berth.Store(backend, identity=IDENTITY, sealer=sealer, clock=clock)
    questions = berth.QuestionStore(backend, identity=IDENTITY, sealer=sealer, clock=clock)
    store.save("k", make_envelope())
    asked = questions.ask("k", PROMPT)
    names = sorted(backend.inner.scan(""))
    assert names == [f"{IDENTITY}/k", f"{IDENTITY}:questions/k"]
    assert [x.key for x in store.list()] == ["k"]
    assert [q for q, _ in questions.list()] == [asked]
    # Moving a question frame over the envelope (or back) does not open: the frame names its namespace.
    question_frame = bytes(backend.inner.get(f"{IDENTITY}:questions/k")[0])
    envelope_frame = bytes(backend.inner.get(f"{IDENTITY}/k")[0])
    backend.inner.put(f"{IDENTITY}/k", question_frame)
    with pytest.raises(berth.IntegrityError):
        store.load("k")
    backend.inner.put(f"{IDENTITY}:questions/k", envelope_frame)
    with pytest.raises(berth.IntegrityError):
        questions.pending("k")


def test_question_frame_moved_to_another_key_does_not_open(questions: berth.QuestionStore) -> None:
    questions.ask("a", PROMPT)
    inner = flaky(questions).inner
    inner.put(f"{IDENTITY}:questions/b", bytes(inner.get(f"{IDENTITY}:questions/a")[0]))
    with pytest.raises(berth.IntegrityError) as info:
        questions.answer("b")
    assert_clean(info.value, "b")


def test_sealed_prompt_and_answer_are_not_readable_at_rest(questions: berth.QuestionStore) -> None:
    asked = questions.ask("k", PROMPT)
    questions.provide("k", asked.id, REPLY, by="alice")
    raw = bytes(flaky(questions).inner.get(f"{IDENTITY}:questions/k")[0])
    assert SECRET.encode() not in raw
    assert b"alice" not in raw


def test_plaintext_questions_are_stored_readable(make_questions: Callable[..., berth.QuestionStore]) -> None:
    questions = make_questions(sealer=berth.PlaintextSealer())
    questions.ask("k", PROMPT)
    assert SECRET.encode() in bytes(flaky(questions).inner.get(f"{IDENTITY}:questions/k")[0])


def test_a_sealed_store_refuses_plaintext_records(make_questions: Callable[..., berth.QuestionStore]) -> None:
    plain = make_questions(sealer=berth.PlaintextSealer())
    plain.ask("k", "q?")
    sealed = make_questions(backend=plain.backend)
    with pytest.raises(berth.IntegrityError, match="plaintext"):
        sealed.pending("k")


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "nul\x00", "x" * 1025])
def test_bad_keys_are_refused_before_any_io(questions: berth.QuestionStore, key: str) -> None:
    calls = flaky(questions).calls
    for call in (
        lambda: questions.ask(key, "q?"),
        lambda: questions.pending(key),
        lambda: questions.answer(key),
        lambda: questions.provide(key, "id", "a", by="x"),
        lambda: questions.consume(key, "id"),
    ):
        with pytest.raises(berth.InvalidKey):
            call()
    assert calls == []


@pytest.mark.parametrize("identity", ["", "a:questions", "a/b", "..", "x" * 129])
def test_bad_identities_are_refused(identity: str) -> None:
    with pytest.raises(berth.InvalidKey):
        berth.open_questions("memory://", identity=identity)


def test_non_str_arguments_are_refused_before_any_io(questions: berth.QuestionStore) -> None:
    with pytest.raises(TypeError):
        questions.ask("k", b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        questions.provide("k", "id", None, by="x")
    with pytest.raises(TypeError):
        questions.provide("k", "id", "a", by=None)
    with pytest.raises(berth.InvalidKey):
        questions.ask("k", "q?", question_id="")
    assert flaky(questions).calls == []


def test_backend_failures_are_backend_errors(questions: berth.QuestionStore) -> None:
    asked = questions.ask("k", PROMPT)
    flaky(questions).fail.add("get")
    for call in (
        lambda: questions.pending("k"),
        lambda: questions.answer("k"),
        lambda: questions.provide("k", asked.id, REPLY, by="x"),
        lambda: questions.consume("k", asked.id),
    ):
        with pytest.raises(berth.BackendError) as info:
            call()
        assert_clean(info.value, "k")


def test_open_questions_by_url(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    with berth.open_questions(url, identity=IDENTITY, sealer=berth.PlaintextSealer()) as one:
        asked = one.ask("k", "q?")
    with berth.open_questions(url, identity=IDENTITY, sealer=berth.PlaintextSealer()) as two:
        assert two.pending("k") == asked
        assert "QuestionStore(SqliteBackend" in repr(two)
    with pytest.raises(berth.BerthError, match="unknown store scheme"):
        berth.open_questions("nope://x", identity=IDENTITY)


def test_questions_under_a_kms_sealer_name_their_namespace_in_the_wrap_context() -> None:
    from collections.abc import Mapping

    from berth.backends.memory import MemoryBackend
    from berth.kms import LocalKms

    contexts: list[dict[str, str]] = []

    class AuditedKms(LocalKms):
        def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Any:
            contexts.append(dict(context))
            return super().wrap(data_key, context=context)

    backend = MemoryBackend()
    sealer = berth.KmsSealer(AuditedKms(berth.Keyring.generate()))
    questions = berth.QuestionStore(backend, identity=IDENTITY, sealer=sealer)
    asked = questions.ask("org/repo#42", PROMPT)
    assert questions.pending("org/repo#42") == asked
    frame = backend.get(f"{IDENTITY}:questions/org/repo#42")
    assert frame is not None and SECRET.encode() not in frame[0]
    # The KMS audit log ties the unwrap to the question namespace, not to the envelope of the same key.
    assert len(contexts) == 1
    assert sorted(contexts[0].values()) == sorted([f"{IDENTITY}:questions", "org/repo#42"])


def test_question_and_answer_reprs_show_ids_and_sizes_not_text() -> None:
    qs = berth.open_questions("memory://", identity="a")
    q = qs.ask("k", "Drop the production database?", run_id="run-1")
    a = qs.provide("k", q.id, "yes, the password is hunter2", by="alice")
    for obj in (q, a):
        assert "production" not in repr(obj) and "hunter2" not in repr(obj) and "hunter2" not in str(obj)
        assert q.id in repr(obj)
    assert "<29 chars>" in repr(q) and "'alice'" in repr(a) and "<28 chars>" in repr(a)


def _face(cls: type, dunders: set[str]) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")} | (dunders & set(dir(cls)))


def test_the_sync_and_async_question_stores_are_twins_method_by_method(tmp_path: Any) -> None:
    # The hand-written twins had drifted (issue 33): the async store had no `backend` and kept its core
    # private, and the sync `list` checked its prefix only once iterated. The sync store is now generated
    # from the async one (scripts/twin.py); what is left to differ is the async store's `sync` and its names.
    renamed = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
    awaited = _face(berth.aio.AsyncQuestionStore, {"__aenter__", "__aexit__"})
    assert {renamed.get(name, name) for name in awaited} - {"sync"} == _face(berth.QuestionStore, set(renamed.values()))
    url = f"sqlite:///{tmp_path}/q.db"
    plain = berth.PlaintextSealer()
    with berth.open_questions(url, identity=IDENTITY, sealer=plain) as questions:
        with pytest.raises(berth.InvalidKey):
            questions.list("/absolute")  # when called, before any I/O, as the async one
        assert isinstance(questions.backend, Backend)
        asked = questions.ask("k", "q?")

    async def awaited_side() -> None:
        async with berth.aio.open_questions(url, identity=IDENTITY, sealer=plain) as aq:
            with pytest.raises(berth.InvalidKey):
                aq.list("/absolute")
            assert isinstance(aq.backend, berth.aio.AsyncBackend)
            assert aq.core.identity == IDENTITY
            assert repr(aq).startswith(f"AsyncQuestionStore(ThreadedBackend, identity={IDENTITY!r}, sealer=")
            assert await aq.pending("k") == asked
            assert aq.sync.pending("k") == asked  # made on first use, over the same backend
            assert aq.sync is aq.sync

    asyncio.run(awaited_side())
