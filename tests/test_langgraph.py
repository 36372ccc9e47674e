"""berth.langgraph: LangGraph's own checkpointer conformance suite against both savers, and what sealing refuses."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

import berth
import berth.aio
from tests.conftest import require

require("langgraph.checkpoint.conformance", "LangGraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.conformance import validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402
from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer  # noqa: E402

from berth.langgraph import AsyncBerthSaver, BerthSaver  # noqa: E402

KEYRING = berth.Keyring.generate()


def _sealer() -> berth.Sealer:
    return berth.AesGcmSealer(KEYRING)


_SERVERS = {
    "postgresql": pytest.mark.postgres,
    "redis": pytest.mark.redis,
    "s3": pytest.mark.s3,
    "gcs": pytest.mark.gcs,
}


@dataclass
class Target:
    """Where a conformance run parks its frames: a store URL and the options `open_store` takes with it."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def fake_gcs() -> Iterator[Any]:
    require("google.cloud.storage", "Cloud Storage")
    from tests.fakes.gcs import FakeGcs

    with FakeGcs() as gcs:
        yield gcs


CASES = [
    pytest.param(kind, flavour, id=f"{kind}-{flavour}", marks=[_SERVERS[kind]] if kind in _SERVERS else [])
    for kind in ["memory", "sqlite", "file", *_SERVERS]
    for flavour in ("sync", "async")
]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """Each of the seven backends, with a namespace of its own on the shared servers."""
    kind = request.param
    if kind == "memory":
        yield Target(f"memory://langgraph-{uuid.uuid4().hex}")
    elif kind == "sqlite":
        yield Target(f"sqlite:///{tmp_path}/berth.db")
    elif kind == "file":
        yield Target(f"file://{tmp_path}/frames")
    elif kind == "gcs":  # the in-repo fake: it honours every precondition the savers' conditional saves send
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/berth-test-credentials.json")
        monkeypatch.setenv("NO_GCE_CHECK", "true")
        fake = request.getfixturevalue("fake_gcs")
        bucket = f"berth-lg-{uuid.uuid4().hex[:16]}"
        fake.create_bucket(bucket)
        yield Target(f"gs://{bucket}/lg", {"endpoint": fake.url})
    elif kind == "s3":  # a moto server, fake credentials, no shared config: nothing can reach AWS
        boto3 = require("boto3", "S3")
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config")),
                            ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))):  # fmt: skip
            monkeypatch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(name, raising=False)
        moto_url: str = request.getfixturevalue("moto_url")
        bucket = f"berth-lg-{uuid.uuid4().hex[:16]}"
        client = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        client.close()
        yield Target(f"s3://{bucket}/lg", {"endpoint_url": moto_url})
    elif kind == "postgresql":
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = f"berth_lg_{uuid.uuid4().hex[:12]}"
        yield Target(f"{dsn}?schema={schema}")
        psycopg = require("psycopg", "PostgreSQL")
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix = f"berth-lg-{uuid.uuid4().hex[:12]}:"
        yield Target(f"{redis_url}?prefix={prefix}&check_durability=false")
        redis = require("redis", "Redis")
        admin = redis.Redis.from_url(redis_url)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


def _registered(target: Target, flavour: str) -> RegisteredCheckpointer:
    async def factory() -> AsyncGenerator[Any, None]:
        identity = f"lg-{uuid.uuid4().hex[:12]}"  # a fresh saver per capability suite, as the suite asks
        if flavour == "sync":
            store = berth.open_store(target.url, identity=identity, sealer=_sealer(), **target.options)
            try:
                yield BerthSaver(store)
            finally:
                store.close()
        else:
            opened = berth.aio.open_store(target.url, identity=identity, sealer=_sealer(), **target.options)
            async with opened as astore:
                yield AsyncBerthSaver(astore)

    return RegisteredCheckpointer(name=f"berth-{flavour}", factory=factory)


@pytest.mark.parametrize(("target", "flavour"), CASES, indirect=["target"])
def test_langgraph_conformance_suite_passes_every_capability(target: Target, flavour: str) -> None:
    started = time.perf_counter()
    report = asyncio.run(validate(_registered(target, flavour)))
    elapsed = time.perf_counter() - started
    assert set(report.results) == {cap.value for cap in ALL_CAPABILITIES}
    failures = {name: r.failures for name, r in report.results.items() if not (r.detected and r.passed)}
    assert not failures, failures
    assert all(r.tests_skipped == 0 and r.tests_passed > 0 for r in report.results.values())
    print(f"conformance {flavour} on {target.url.split(':')[0]}: {len(report.results)} capabilities in {elapsed:.2f}s")


# -- what sealing and binding refuse ------------------------------------------------------------


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _put(saver: BerthSaver, thread: str, values: dict[str, Any]) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    stored: Any = saver.put(_config(thread), checkpoint, {"source": "loop", "step": 0}, {})
    return dict(stored)


def test_a_planted_plaintext_checkpoint_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/b.db"
    saver = BerthSaver(berth.open_store(url, identity="ops", sealer=_sealer()))
    _put(saver, "t1", {"approved": False})
    # an attacker with write access to the database plants a well-formed checkpoint, sealed by nobody
    planter = BerthSaver(berth.open_store(url, identity="ops", sealer=berth.PlaintextSealer()))
    planted = _put(planter, "t1", {"approved": True})
    with pytest.raises(berth.IntegrityError, match="plaintext frame") as caught:
        saver.get_tuple(_config("t1"))
    assert "approved" not in str(caught.value)
    with pytest.raises(berth.IntegrityError):
        saver.get_tuple(planted)


def test_a_checkpoint_moved_to_another_thread_is_refused(tmp_path: Path) -> None:
    store = berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops", sealer=_sealer())
    saver = BerthSaver(store)
    stored = _put(saver, "alice", {"approved": True})
    cid = stored["configurable"]["checkpoint_id"]
    # copy alice's sealed frame, byte for byte, to where bob's checkpoint would be
    source = store.core.name(f"langgraph/alice/~/c/{cid}")
    frame = store.backend.get(source)
    assert frame is not None
    store.backend.put(store.core.name(f"langgraph/bob/~/c/{cid}"), bytes(frame[0]))
    assert saver.get_tuple(_config("alice")) is not None
    with pytest.raises(berth.IntegrityError):
        saver.get_tuple(_config("bob"))
    with pytest.raises(berth.IntegrityError):
        list(saver.list(_config("bob")))


def test_a_flipped_byte_is_refused(tmp_path: Path) -> None:
    store = berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops", sealer=_sealer())
    saver = BerthSaver(store)
    stored = _put(saver, "t1", {"approved": False})
    saver.put_writes(stored, [("approved", False)], "task-1")
    checkpoint = f"langgraph/t1/~/c/{stored['configurable']['checkpoint_id']}"
    for key in (checkpoint, f"{checkpoint}/task-1"):  # the checkpoint, then its writes
        name = store.core.name(key)
        frame = store.backend.get(name)
        assert frame is not None
        data = bytearray(frame[0])
        data[-3] ^= 0x01
        store.backend.put(name, bytes(data))
        with pytest.raises(berth.IntegrityError):
            saver.get_tuple(_config("t1"))
        store.backend.put(name, bytes(frame[0]))  # restore, then break the writes frame next
    assert saver.get_tuple(_config("t1")) is not None


@pytest.mark.parametrize(
    "thread",
    ["", ".", "..", "a/b", "t" * 5000, "émoji 🚀 / space", "~", "~h" + "0" * 64, "%2e%2e", "\x00ctl", "a" * 180],
)
def test_thread_ids_of_any_length_and_alphabet_round_trip_apart(thread: str) -> None:
    saver = BerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()))
    mine = _put(saver, thread, {"who": "me"})
    _put(saver, thread + "x", {"who": "other"})
    got = saver.get_tuple(_config(thread))
    assert got is not None and got.checkpoint["channel_values"] == {"who": "me"}
    assert got.config["configurable"]["thread_id"] == thread
    assert got.config["configurable"]["checkpoint_id"] == mine["configurable"]["checkpoint_id"]
    assert [t.config["configurable"]["thread_id"] for t in saver.list(_config(thread))] == [thread]
    saver.delete_thread(thread)
    assert saver.get_tuple(_config(thread)) is None
    assert saver.get_tuple(_config(thread + "x")) is not None


def test_the_latest_checkpoint_is_the_newest_by_time(tmp_path: Path) -> None:
    saver = BerthSaver(berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops", sealer=_sealer()))
    ids = [_put(saver, "t1", {"n": i})["configurable"]["checkpoint_id"] for i in range(20)]
    assert ids == sorted(ids)
    latest = saver.get_tuple(_config("t1"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"n": 19}
    page = [t.checkpoint["channel_values"]["n"] for t in saver.list(_config("t1"), limit=3)]
    assert page == [19, 18, 17]


def test_savers_refuse_the_wrong_store_before_any_io() -> None:
    with pytest.raises(TypeError, match="berth.Store"):
        BerthSaver(object())
    with pytest.raises(TypeError, match="AsyncStore"):
        AsyncBerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()))
    with pytest.raises(ValueError, match="prefix"):
        BerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()), prefix="no-slash")


# -- resume exactly once ---------------------------------------------------------------------------


def _approval_graph(saver: Any, ran: list[Any]) -> Any:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class State(TypedDict, total=False):
        action: str
        verdict: str

    def ask(state: State) -> State:
        verdict = interrupt({"question": f"run {state['action']}?"})
        ran.append(verdict)  # the side effect that must happen once
        return {"verdict": verdict}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def test_resume_once_resumes_for_exactly_one_of_four_racing_threads(tmp_path: Path) -> None:
    import threading

    from berth.langgraph import resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "ticket-7"}}
    first = _approval_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
    paused = first.invoke({"action": "drop table"}, config)
    assert "__interrupt__" in paused and ran == []
    # the interrupt is parked as a berth question: what `berth questions` and the inbox list
    asked = list(berth.open_questions(url, identity="ops", sealer=sealer).list("langgraph/ticket-7/"))
    assert [q.prompt for q, answer in asked] == ['{"question":"run drop table?"}']
    assert asked[0][1] is None and asked[0][0].key.startswith("langgraph/ticket-7/~/q/")
    barrier = threading.Barrier(4)
    outputs: list[Any] = [None] * 4
    errors: list[BaseException] = []

    def waker(i: int) -> None:
        try:  # each thread opens its own store, as another process would
            graph = _approval_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
            barrier.wait(timeout=30)
            outputs[i] = resume_once(graph, config, f"approve-{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    winners = [out for out in outputs if out is not None]
    assert len(winners) == 1 and len(ran) == 1
    assert winners[0]["verdict"] == ran[0]
    # once resumed, the thread waits on nothing: a late caller gets None and nothing runs again
    assert resume_once(first, config, "approve-late") is None and len(ran) == 1


def test_resume_once_past_the_deadline_raises_expired_and_never_resumes(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from berth.langgraph import aresume_once, resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t1"}}
    graph = _approval_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
    graph.invoke({"action": "deploy"}, config)

    def later() -> datetime:
        return datetime.now(timezone.utc) + timedelta(days=15)

    late = _approval_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer, clock=later)), ran)
    with pytest.raises(berth.Expired, match="deadline") as caught:
        resume_once(late, config, "approve")
    assert caught.value.key is not None and caught.value.key.startswith("langgraph/t1/")
    with pytest.raises(berth.Expired):
        asyncio.run(aresume_once(late, config, "approve"))
    assert ran == []
    # within a longer deadline it still resumes, once
    assert resume_once(late, config, "approve", deadline=timedelta(days=30)) == {
        "action": "deploy",
        "verdict": "approve",
    }
    assert ran == ["approve"]
    with pytest.raises(TypeError, match="checkpointer"):
        resume_once(object(), config, "approve")


# -- several pending interrupts in one thread (parallel branches) -----------------------------------


class BranchesState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _branches_graph(saver: Any, ran: list[Any]) -> Any:
    """START fans out to `a` and `b`, each asks its own question; `join` runs once both have answers."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def branch(name: str) -> Any:
        def node(state: BranchesState) -> BranchesState:
            answer = interrupt(f"may {name} go ahead?")
            ran.append((name, answer))  # the side effect that must happen once per branch
            return {"log": [f"{name}={answer}"]}

        return node

    def join(state: BranchesState) -> BranchesState:
        ran.append(("join", sorted(state["log"])))
        return {"log": ["join"]}

    builder = StateGraph(BranchesState)
    builder.add_node("a", branch("a"))
    builder.add_node("b", branch("b"))
    builder.add_node("join", join)
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge(["a", "b"], "join")
    builder.add_edge("join", END)
    return builder.compile(checkpointer=saver)


def test_parallel_interrupts_are_one_question_each_and_each_resumes_once(tmp_path: Path) -> None:
    import threading

    from berth.langgraph import aresume_once, resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "deploy-9"}}
    first = _branches_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
    paused = first.invoke({"log": []}, config)
    ids = {item.value: item.id for item in paused["__interrupt__"]}
    assert set(ids) == {"may a go ahead?", "may b go ahead?"} and ran == []
    a_id, b_id = ids["may a go ahead?"], ids["may b go ahead?"]
    # each interrupt is its own berth question, identified by the interrupt's id
    questions = berth.open_questions(url, identity="ops", sealer=sealer)
    asked = {q.prompt: q for q, _ in questions.list("langgraph/deploy-9/")}
    assert {p: q.id for p, q in asked.items()} == ids
    # one plain value cannot say which interrupt it answers: refused before anything is claimed
    with pytest.raises(ValueError, match="2 interrupts"):
        resume_once(first, config, "yes")
    assert ran == []

    # four resumers race on each interrupt at once, the sync and the async face mixed
    barrier = threading.Barrier(8)
    outputs: dict[tuple[str, int], Any] = {}
    errors: list[BaseException] = []

    def waker(branch: str, i: int) -> None:
        iid = a_id if branch == "a" else b_id
        try:
            if i % 2:
                graph = _branches_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
                barrier.wait(timeout=30)
                outputs[branch, i] = resume_once(graph, config, {iid: f"ok-{i}"})
            else:

                async def go() -> Any:
                    async with berth.aio.open_store(url, identity="ops", sealer=sealer) as astore:
                        graph = _branches_graph(AsyncBerthSaver(astore), ran)
                        barrier.wait(timeout=30)
                        return await aresume_once(graph, config, {iid: f"ok-{i}"})

                outputs[branch, i] = asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waker, args=(b, i)) for b in "ab" for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    winners = {branch for (branch, _), out in outputs.items() if out is not None}
    assert sorted(winners) == ["a", "b"] and sum(out is not None for out in outputs.values()) == 2
    # each branch resumed exactly once, and the step completed: join ran once, with both answers
    assert sorted(name for name, _ in ran) == ["a", "b", "join"]
    answers = {name: answer for name, answer in ran if name != "join"}
    assert ran[-1] == ("join", sorted(f"{n}={a}" for n, a in answers.items()))
    state = first.get_state(config)
    assert state.next == () and not state.interrupts and state.values["log"][-1] == "join"
    # nothing waits now: late callers get None, nothing runs again, the questions are consumed
    assert resume_once(first, config, {a_id: "late", b_id: "late"}) is None and len(ran) == 3
    assert list(questions.list("langgraph/deploy-9/")) == []


def test_a_resume_map_resumes_only_the_interrupts_it_names(tmp_path: Path) -> None:
    from berth.langgraph import resume_once

    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t1"}}
    graph = _branches_graph(BerthSaver(berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops",
                                                        sealer=_sealer())), ran)  # fmt: skip
    ids = {item.value: item.id for item in graph.invoke({"log": []}, config)["__interrupt__"]}
    a_id, b_id = ids["may a go ahead?"], ids["may b go ahead?"]
    out = resume_once(graph, config, {a_id: "yes"})
    assert [i.id for i in out["__interrupt__"]] == [b_id] and ran == [("a", "yes")]
    assert resume_once(graph, config, {a_id: "again"}) is None  # a is answered: its claim is taken
    assert resume_once(graph, config, "no") == {"log": ["a=yes", "b=no", "join"]}  # one left: a plain value
    assert ran == [("a", "yes"), ("b", "no"), ("join", ["a=yes", "b=no"])]


# -- the double-resume experiment: 4 processes race resume_once on every thread ----------------------

RACE = Path(__file__).resolve().parents[1] / "benchmarks" / "_resume_race.py"


@pytest.mark.parametrize(
    ("backend", "threads"),
    [
        pytest.param("sqlite", 200, id="sqlite-200"),
        pytest.param("postgres", 200, marks=pytest.mark.postgres, id="postgresql-200"),
    ],
)
def test_four_processes_racing_resume_once_resume_every_thread_exactly_once(
    backend: str, threads: int, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """benchmarks/_resume_race.py: `threads` interrupted threads, 4 processes resume each; count the node's runs."""
    env = dict(os.environ)
    if backend == "postgres":
        env["BERTH_TEST_POSTGRES"] = request.getfixturevalue("postgres_dsn")
    command = [sys.executable, str(RACE), "--who", "berth", "--backend", backend, "--threads", str(threads)]
    proc = subprocess.run([*command, "--dir", str(tmp_path)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["processes"] == 4 and result["errors"] == {}
    assert (result["resumes"], result["resumed_twice_or_more"], result["never_resumed"]) == (threads, 0, 0)
    assert result["exactly_once"] is True


def test_a_page_of_history_carries_each_checkpoints_own_writes() -> None:
    """list() reads a page's writes from one newest-first listing, widening it when tasks outnumber its guess."""
    saver = BerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()))
    parent: Any = _config("t1")
    for step in range(6):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"step": step}
        stored = saver.put(parent, checkpoint, {"source": "loop", "step": step}, {})
        for task in range(step * 2):  # up to 10 tasks: more than four per checkpoint
            saver.put_writes(stored, [("out", f"{step}-{task}")], f"task-{task:02d}")
        parent = stored
    for limit in (1, 3, 6, None):
        page = list(saver.list(_config("t1"), limit=limit))
        steps = [t.checkpoint["channel_values"]["step"] for t in page]
        assert steps == [5, 4, 3, 2, 1, 0][: limit or 6]
        for tup, step in zip(page, steps, strict=True):
            assert [w[2] for w in tup.pending_writes or []] == [f"{step}-{task}" for task in range(step * 2)]


def test_a_second_resume_of_one_checkpoint_waits_for_the_run_lease_and_takes_over_a_dead_ones(
    tmp_path: Path,
) -> None:
    import threading
    from datetime import datetime, timedelta, timezone

    from berth.langgraph import resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    store = berth.open_store(url, identity="ops", sealer=sealer)
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t1"}}
    graph = _branches_graph(BerthSaver(store), ran)
    ids = {item.value: item.id for item in graph.invoke({"log": []}, config)["__interrupt__"]}
    tup = graph.checkpointer.get_tuple(config)
    lease = f"langgraph/t1/~/l/{tup.config['configurable']['checkpoint_id']}"
    # another resumer holds the checkpoint's run lease: this one claims its interrupt, then waits
    token = store.save(lease, berth.Envelope(provider="langgraph", provider_state={}, deadline=berth_deadline(60)))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (resume_once(graph, config, {ids["may a go ahead?"]: "yes"}), done.set()))
    worker.start()
    assert not done.wait(0.5) and ran == []
    store.delete(lease, token)  # released: the waiter runs
    worker.join(timeout=60)
    assert done.is_set() and ran == [("a", "yes")]
    # a resumer that died holding the lease: once its lease lapses, the next one takes it over
    store.save(lease, berth.Envelope(provider="langgraph", provider_state={}, deadline=berth_deadline(60)))

    def later() -> datetime:
        return datetime.now(timezone.utc) + timedelta(hours=1)

    late = _branches_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer, clock=later)), ran)
    assert resume_once(late, config, {ids["may b go ahead?"]: "no"}) == {"log": ["a=yes", "b=no", "join"]}
    assert [name for name, *_ in ran] == ["a", "b", "join"]


def berth_deadline(seconds: int) -> Any:
    from datetime import datetime, timedelta, timezone

    return datetime.now(timezone.utc) + timedelta(seconds=seconds)
