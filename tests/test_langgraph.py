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
from collections import Counter
from collections.abc import AsyncGenerator, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgspec
import pytest

import berth
import berth.aio
from tests.conftest import require

require("langgraph.checkpoint.conformance", "LangGraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.conformance import validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402
from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer  # noqa: E402

from berth.backends._aio import ThreadedBackend  # noqa: E402
from berth.langgraph import AsyncBerthSaver, BerthSaver  # noqa: E402
from berth.langgraph import _frames as frames  # noqa: E402
from berth.langgraph._frames import SaverSteps  # noqa: E402

KEYRING = berth.Keyring.generate()


def _sealer() -> berth.Sealer:
    return berth.AesGcmSealer(KEYRING)


_SERVERS = {
    "postgresql": pytest.mark.postgres,
    "redis": pytest.mark.redis,
    "redis-cluster": pytest.mark.redis,
    "s3": pytest.mark.s3,
    "gcs": pytest.mark.gcs,
    "dynamodb": pytest.mark.dynamodb,
    "azblob": pytest.mark.azblob,
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


def _unset(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """No account, endpoint or profile from the environment: nothing here reaches a cloud."""
    for name in names:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """Each backend (Redis twice: one server, and a cluster), with a namespace of its own on the shared servers."""
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
    elif kind in ("s3", "dynamodb"):  # a moto server, fake credentials, no shared config: nothing can reach AWS
        boto3 = require("boto3", "S3")
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config")),
                            ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))):  # fmt: skip
            monkeypatch.setenv(name, value)
        _unset(monkeypatch, "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
               "AWS_ENDPOINT_URL_DYNAMODB")  # fmt: skip
        moto_url: str = request.getfixturevalue("moto_url")
        bucket = f"berth-lg-{uuid.uuid4().hex[:16]}"
        if kind == "dynamodb":  # a fresh table, made as `berth setup` makes it
            url = f"dynamodb://{bucket}?endpoint_url={moto_url}"
            with berth.open_store(url, identity="setup", sealer=_sealer()) as store:
                store.backend.setup()
            yield Target(url)
            return
        client = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        client.close()
        yield Target(f"s3://{bucket}/lg", {"endpoint_url": moto_url})
    elif kind == "azblob":  # the session's Azurite, a fresh container made as `berth setup` makes it
        _unset(monkeypatch, "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
               "AZURE_STORAGE_SAS_TOKEN")  # fmt: skip
        azurite: str = request.getfixturevalue("azurite")
        url = f"azblob://berth-lg-{uuid.uuid4().hex[:16]}/lg"
        with berth.open_store(url, identity="setup", sealer=_sealer(), connection_string=azurite) as store:
            store.backend.setup()
        yield Target(url, {"connection_string": azurite})
    elif kind == "postgresql":
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = f"berth_lg_{uuid.uuid4().hex[:12]}"
        yield Target(f"{dsn}?schema={schema}")
        psycopg = require("psycopg", "PostgreSQL")
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif kind == "redis-cluster":  # the session's three-node cluster: frames spread over every primary
        cluster_url: str = request.getfixturevalue("redis_cluster_url")
        prefix = f"berth-lg-{uuid.uuid4().hex[:12]}:"
        yield Target(f"{cluster_url}?prefix={prefix}&check_durability=false")
        from berth.backends.redis import RedisClusterBackend

        backend = RedisClusterBackend.from_url(cluster_url, prefix=prefix, check_durability=False)
        for node in backend.client.get_primaries():
            server = backend.client.get_redis_connection(node)
            for key in server.scan_iter(match=f"{prefix}*"):
                server.unlink(key)
        backend.close()
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


def _as_json_frames(store: berth.Store, prefix: str) -> int:
    """Rewrite every saver frame under `prefix` as a berth before binary state wrote it (a JSON body, format 1)."""
    rewritten = 0
    for key, parked in list(store.load_prefix(prefix)):
        env = parked.envelope
        assert env.content_type == frames.CONTENT_TYPE
        body = msgspec.msgpack.decode(env.provider_state)  # the same members, the bytes base64 in JSON
        store.save(key, env.replace(provider_state=msgspec.json.encode(body), content_type=None, created_at=None))
        found = store.backend.get(store.core.name(key))
        assert found is not None and bytes(found[0])[8] == 1
        rewritten += 1
    return rewritten


def test_checkpoints_written_before_binary_state_still_read_merge_and_copy(tmp_path: Path) -> None:
    store = berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops", sealer=_sealer())
    saver = BerthSaver(store)
    first = _put(saver, "t1", {"n": 1})
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": 2, "blob": b"\x00\xff"}
    second: Any = saver.put(first, checkpoint, {"source": "loop", "step": 1}, {})
    saver.put_writes(second, [("out", "old write")], "task-1")
    assert _as_json_frames(store, "langgraph/t1/") == 3
    latest = saver.get_tuple(_config("t1"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"n": 2, "blob": b"\x00\xff"}
    assert [w[1:] for w in latest.pending_writes or []] == [("out", "old write")]
    assert [t.checkpoint["channel_values"]["n"] for t in saver.list(_config("t1"))] == [2, 1]
    # a new write merged into an old writes frame: the old one kept, the frame now binary
    saver.put_writes(second, [("out", "ignored: idx 0 is stored"), ("more", "new")], "task-1")
    name = store.core.name(f"langgraph/t1/~/c/{second['configurable']['checkpoint_id']}/task-1")
    found = store.backend.get(name)
    assert found is not None and bytes(found[0])[8] == 2
    latest = saver.get_tuple(_config("t1"))
    assert latest is not None and [w[1:] for w in latest.pending_writes or []] == [
        ("out", "old write"),
        ("more", "new"),
    ]
    saver.copy_thread("t1", "t2")  # copied in the format each frame was read in
    copied = saver.get_tuple(_config("t2"))
    assert copied is not None and copied.checkpoint["channel_values"]["n"] == 2

    async def aread() -> Any:
        async with berth.aio.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops", sealer=_sealer()) as astore:
            return await AsyncBerthSaver(astore).aget_tuple(_config("t1"))

    old = asyncio.run(aread())
    assert old is not None and old.checkpoint["channel_values"]["n"] == 2


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
    # one left, but a plain value cannot prove it was given for b (an interrupt here was resumed): nothing
    assert resume_once(graph, config, "no") is None and ran == [("a", "yes")]
    assert resume_once(graph, config, {b_id: "no"}) == {"log": ["a=yes", "b=no", "join"]}
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


# -- issue 29: answers bound to their interrupt, deadlines behind the lease, cancellation ----------------


def _two_step_graph(saver: Any, ran: list[Any]) -> Any:
    """`push` asks "push to main?", then `deploy` asks "deploy to production?": two interrupts in turn."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class State(TypedDict, total=False):
        push: str
        deploy: str

    def push(state: State) -> State:
        answer = interrupt("push to main?")
        ran.append(("push", answer))
        return {"push": answer}

    def deploy(state: State) -> State:
        answer = interrupt("deploy to production?")
        ran.append(("deploy", answer))
        return {"deploy": answer}

    builder = StateGraph(State)
    builder.add_node("push", push)
    builder.add_node("deploy", deploy)
    builder.add_edge(START, "push")
    builder.add_edge("push", "deploy")
    builder.add_edge("deploy", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_delivered_again_answer_never_answers_the_next_interrupt(face: str, tmp_path: Path) -> None:
    from berth.langgraph import aresume_once, resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []

    async def go() -> None:
        async with berth.aio.open_store(url, identity="ops", sealer=sealer) as astore:
            graph = _two_step_graph(AsyncBerthSaver(astore), ran)

            async def resume(config: Any, value: Any) -> Any:
                return await aresume_once(graph, config, value)

            await check(graph, resume)

    async def check(graph: Any, resume: Any) -> None:
        # bound: the answer names its interrupt; once the thread moved on, a repeat of it answers nothing
        bound = {"configurable": {"thread_id": "bound"}}
        (push,) = graph.invoke({}, bound)["__interrupt__"]
        out = await resume(bound, {push.id: "yes"})
        (deploy,) = out["__interrupt__"]
        assert deploy.value == "deploy to production?" and deploy.id != push.id
        assert await resume(bound, {push.id: "yes"}) is None
        assert await resume(bound, {deploy.id: "go"}) == {"push": "yes", "deploy": "go"}
        # plain: it answers the thread's first interrupt; delivered again after that, it answers nothing
        plain = {"configurable": {"thread_id": "plain"}}
        graph.invoke({}, plain)
        assert "__interrupt__" in await resume(plain, "yes")
        assert await resume(plain, "yes") is None
        assert [i.value for i in graph.get_state(plain).interrupts] == ["deploy to production?"]
        assert ran == [("push", "yes"), ("deploy", "go"), ("push", "yes")]

    if face == "async":
        asyncio.run(go())
    else:
        graph = _two_step_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)

        async def resume(config: Any, value: Any) -> Any:
            return resume_once(graph, config, value)

        asyncio.run(check(graph, resume))


def test_a_plain_value_answers_nothing_beside_a_question_left_by_a_resume_outside_berth(tmp_path: Path) -> None:
    from langgraph.types import Command

    from berth.langgraph import resume_once

    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t"}}
    graph = _two_step_graph(BerthSaver(berth.open_store(f"sqlite:///{tmp_path}/b.db", identity="ops",
                                                        sealer=_sealer())), ran)  # fmt: skip
    graph.invoke({}, config)
    graph.invoke(Command(resume="yes"), config)  # LangGraph alone: the push question stays open
    assert resume_once(graph, config, "yes") is None and ran == [("push", "yes")]


def test_a_resumer_waiting_for_the_run_lease_never_runs_past_the_deadline(tmp_path: Path) -> None:
    import threading
    from datetime import datetime, timedelta, timezone

    from berth.langgraph import resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    shift = [timedelta(0)]

    def clock() -> datetime:
        return datetime.now(timezone.utc) + shift[0]

    store = berth.open_store(url, identity="ops", sealer=sealer, clock=clock)
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t1"}}
    graph = _branches_graph(BerthSaver(store), ran)
    ids = {item.value: item.id for item in graph.invoke({"log": []}, config)["__interrupt__"]}
    cid = graph.checkpointer.get_tuple(config).config["configurable"]["checkpoint_id"]
    lease = f"langgraph/t1/~/l/{cid}"
    # another branch's resume holds the run lease, for long
    token = store.save(lease, berth.Envelope(provider="langgraph", provider_state={}, deadline=berth_deadline(86400)))
    caught: list[BaseException] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        try:
            resume_once(graph, config, {ids["may a go ahead?"]: "yes"}, deadline=timedelta(hours=1))
        except BaseException as exc:
            caught.append(exc)

    worker = threading.Thread(target=waiter)
    worker.start()
    started.wait(5)
    time.sleep(0.2)  # it claimed its interrupt and polls the lease
    shift[0] = timedelta(hours=2)  # the deadline passes while it waits
    worker.join(timeout=5)
    store.delete(lease, token)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], berth.Expired) and ran == []
    assert list(store.list("langgraph/t1/~/l/")) == []


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_aresume_once_that_wins_leaves_no_lease_frame(flavour: str, tmp_path: Path) -> None:
    from berth.langgraph import aresume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t1"}}

    async def go() -> Any:
        async with berth.aio.open_store(url, identity="ops", sealer=sealer) as astore:
            saver = AsyncBerthSaver(astore) if flavour == "async" else BerthSaver(astore.sync)
            graph = _approval_graph(saver, ran)
            await graph.ainvoke({"action": "deploy"}, config)
            (asked,) = (await graph.aget_state(config)).interrupts
            return await aresume_once(graph, config, {asked.id: "approve"})

    assert asyncio.run(go()) == {"action": "deploy", "verdict": "approve"} and ran == ["approve"]
    store = berth.open_store(url, identity="ops", sealer=sealer)
    kinds = sorted({listing.key.split("/")[3] for listing in store.list("langgraph/t1/")})
    assert kinds == ["c", "r"]  # checkpoints and the claim record: no lease, no open question


class _Cancelling:
    """Cancels the task it is given at its `at`-th step: a saver call or a store call of aresume_once's."""

    def __init__(self, at: int):
        self.at, self.seen = at, 0
        self.victim: asyncio.Task[Any] | None = None

    def tick(self) -> None:
        self.seen += 1
        if self.seen == self.at and self.victim is not None:
            self.victim.cancel()


def _cancelling_saver(base: type, cancel: _Cancelling) -> Any:
    """`base` (a berth saver class) whose every awaited call counts as a step of `cancel`'s."""

    class Ticking:
        def __init__(self, inner: Any):
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            method = getattr(self.inner, name)

            async def ticked(*args: Any, **kwargs: Any) -> Any:
                cancel.tick()
                return await method(*args, **kwargs)

            return ticked

    class Saver(base):
        def _async_targets(self) -> dict[Any, Any]:
            return {SaverSteps: Ticking(super()._async_targets()[SaverSteps])}

        async def aget_tuple(self, config: Any) -> Any:
            cancel.tick()
            return await super().aget_tuple(config)

        async def aput(self, *args: Any, **kwargs: Any) -> Any:
            cancel.tick()
            return await super().aput(*args, **kwargs)

        async def aput_writes(self, *args: Any, **kwargs: Any) -> Any:
            cancel.tick()
            return await super().aput_writes(*args, **kwargs)

    return Saver


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_aresume_once_cancelled_at_every_await_point_leaves_the_interrupt_resumable(
    flavour: str, tmp_path: Path
) -> None:
    """Cancel the n-th await of aresume_once, n = 1, 2, ... until one runs to its end: never lost, never twice."""
    from berth.langgraph import aresume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    outcomes: Counter[str] = Counter()

    async def trial(at: int) -> bool:
        ran: list[Any] = []
        cancel = _Cancelling(at)
        config = {"configurable": {"thread_id": f"t{at}"}}
        async with berth.aio.open_store(url, identity="ops", sealer=sealer) as astore:
            if flavour == "async":
                saver = _cancelling_saver(AsyncBerthSaver, cancel)(astore)
            else:
                saver = _cancelling_saver(BerthSaver, cancel)(astore.sync)
            graph = _approval_graph(saver, ran)
            await graph.ainvoke({"action": "deploy"}, config)
            (asked,) = (await graph.aget_state(config)).interrupts
            cancel.seen = 0
            task = asyncio.ensure_future(aresume_once(graph, config, {asked.id: "first"}))
            cancel.victim = task
            try:
                out = await task
            except asyncio.CancelledError:
                out = None
            cancel.victim = None
            done = cancel.seen < at  # nothing was cancelled: every await point was tried
            assert not list(astore.sync.list(f"langgraph/t{at}/~/l/")), f"step {at}: a lease frame was left"
            if out is not None or ran:  # it resumed before the cancellation landed: exactly once, never again
                assert ran == ["first"], (at, ran)
                assert await aresume_once(graph, config, {asked.id: "again"}) is None
                outcomes["resumed"] += 1
            else:  # cancelled before the graph got past the interrupt: resumable, and asked again
                questions = berth.open_questions(url, identity="ops", sealer=sealer)
                assert [q.id for q, _ in questions.list(f"langgraph/t{at}/")] == [asked.id], at
                assert await aresume_once(graph, config, {asked.id: "again"}) is not None, at
                assert ran == ["again"], (at, ran)
                outcomes["handed back"] += 1
            return done

    at = 1
    while not asyncio.run(trial(at)):
        at += 1
        assert at < 60
    assert outcomes["handed back"] >= 3 and outcomes["resumed"] >= 3, outcomes


def test_list_without_a_namespace_stays_in_its_thread_beside_a_neighbouring_one() -> None:
    saver = BerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()))
    for thread in ("t", "tx", "t~"):
        for i in range(3):
            _put(saver, thread, {"who": thread, "n": i})
    for thread in ("t", "tx"):
        listed = list(saver.list({"configurable": {"thread_id": thread}}))
        assert [t.checkpoint["channel_values"] for t in listed] == [{"who": thread, "n": i} for i in (2, 1, 0)]
        assert (
            list(saver.list({"configurable": {"thread_id": thread}}, limit=1))[0].config["configurable"]["thread_id"]
            == thread
        )


def test_copy_thread_copies_checkpoints_and_writes_only_and_never_raises_expired(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from berth.langgraph import resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []
    graph = _two_step_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
    config = {"configurable": {"thread_id": "src"}}
    (push,) = graph.invoke({}, config)["__interrupt__"]
    resume_once(graph, config, {push.id: "yes"})  # a claim record beside the checkpoints

    def later() -> datetime:  # past every deadline the thread's frames carry
        return datetime.now(timezone.utc) + timedelta(days=30)

    store = berth.open_store(url, identity="ops", sealer=sealer, clock=later)
    BerthSaver(store).copy_thread("src", "dst")
    kinds = {listing.key.split("/")[3] for listing in store.list("langgraph/dst/")}
    assert kinds == {"c"}  # no claim, lease or question of the source's interrupts
    assert sorted({listing.key.split("/")[3] for listing in store.list("langgraph/src/")}) == ["c", "r"]
    copied = _two_step_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer)), ran)
    state = copied.get_state({"configurable": {"thread_id": "dst"}})
    assert state.values == {"push": "yes"} and [i.value for i in state.interrupts] == ["deploy to production?"]


def _newest_deleted_behind_berths_back(
    url: str, witness: str, sealer: Any
) -> tuple[Any, dict[str, Any], Any, list[Any]]:
    """A two-step graph run to its end over a witnessed store, then its newest checkpoint deleted by a storage
    writer (not through berth): (graph, config, the push interrupt, what the nodes ran)."""
    from berth.backends import open_backend

    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t"}}
    graph = _two_step_graph(BerthSaver(berth.open_store(url, identity="ops", sealer=sealer, witness=witness)), ran)
    (push,) = graph.invoke({}, config)["__interrupt__"]
    graph.invoke(__import__("langgraph.types").types.Command(resume={push.id: "yes"}), config)
    assert ran == [("push", "yes")]
    newest = graph.checkpointer.get_tuple(config).config["configurable"]["checkpoint_id"]
    raw = open_backend(url)
    doomed = [name for name in raw.scan("ops/langgraph/t/~/c/") if newest in name]
    assert len(doomed) >= 2
    for name in doomed:
        raw.delete(name, raw.get(name)[1])
    raw.close()
    # without a witness nothing can tell: the older checkpoint is what is there
    plain = BerthSaver(berth.open_store(url, identity="ops", sealer=sealer))
    assert plain.get_tuple(config).config["configurable"]["checkpoint_id"] < newest
    return graph, config, push, ran


async def _async_reads_refuse(url: str, witness: str, sealer: Any, config: dict[str, Any]) -> None:
    async with berth.aio.open_store(url, identity="ops", sealer=sealer, witness=witness) as astore:
        saver = AsyncBerthSaver(astore)

        def in_a_thread(prefix: str, after: str) -> Any:
            raise AssertionError("the witness's listing ran over the sync twin, in a worker thread")

        if not isinstance(astore.backend, ThreadedBackend):  # over threads the whole read is one hop, on purpose
            astore.sync.frames.keys_after = in_a_thread  # type: ignore[method-assign]  # an async backend awaits
        with pytest.raises(berth.IntegrityError, match="missing"):
            await saver.aget_tuple(config)
        with pytest.raises(berth.IntegrityError, match="missing"):
            [t async for t in saver.alist(config, limit=2)]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_with_a_witness_a_deleted_newest_checkpoint_is_refused_not_served_as_the_older_one(
    flavour: str, tmp_path: Path
) -> None:
    url, witness, sealer = f"sqlite:///{tmp_path}/b.db", f"sqlite:///{tmp_path}/w.db", _sealer()
    graph, config, push, ran = _newest_deleted_behind_berths_back(url, witness, sealer)
    if flavour == "async":
        asyncio.run(_async_reads_refuse(url, witness, sealer, config))
    else:
        with pytest.raises(berth.IntegrityError, match="missing"):
            graph.checkpointer.get_tuple(config)
        with pytest.raises(berth.IntegrityError, match="missing"):
            list(graph.checkpointer.list(config, limit=2))
        with pytest.raises(berth.IntegrityError, match="missing"):
            graph.invoke(__import__("langgraph.types").types.Command(resume={push.id: "yes"}), config)
    assert ran == [("push", "yes")]  # the push node never ran twice


@pytest.mark.redis
def test_with_a_witness_an_async_backends_read_awaits_the_witness_listing(redis_url: str) -> None:
    """On a natively async backend (Redis) the check of what a read did not see is awaited on the loop."""
    prefix = f"berth-lg-unseen-{uuid.uuid4().hex[:8]}"
    url, witness = (f"{redis_url}?prefix={prefix}{part}:&check_durability=false" for part in ("", "-w"))
    sealer = _sealer()
    try:
        _, config, _, _ = _newest_deleted_behind_berths_back(url, witness, sealer)
        asyncio.run(_async_reads_refuse(url, witness, sealer, config))
    finally:
        admin = require("redis", "Redis").Redis.from_url(redis_url)
        admin.delete(*admin.scan_iter(match=f"{prefix}*"))
        admin.close()


def test_list_reads_what_it_returns_with_before_filter_and_without_a_namespace() -> None:
    """A page of history is one bounded read however long the thread: no listing of the thread's keys."""
    saver = BerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()))
    read: Counter[str] = Counter()
    io = saver._sync_io

    class Counting:
        def __getattr__(self, name: str) -> Any:
            method = getattr(io, name)

            def counted(*args: Any, **kwargs: Any) -> Any:
                out = method(*args, **kwargs)
                read[name] += len(out) if isinstance(out, list) else 1
                return out

            return counted

    saver._sync_io = Counting()
    parent: Any = _config("t")
    ids = []
    for step in range(300):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"step": step}
        parent = saver.put(parent, checkpoint, {"source": "loop", "step": step, "even": step % 2 == 0}, {})  # type: ignore[typeddict-unknown-key]
        saver.put_writes(parent, [("out", step)], "task")
        ids.append(parent["configurable"]["checkpoint_id"])
    sub: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "child:1"}}
    for step in range(3):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"child": step}
        sub = saver.put(sub, checkpoint, {"source": "loop", "step": step}, {})
    _put(saver, "tx", {"who": "tx"})
    read.clear()
    before: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ids[150]}}
    root: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    page = list(saver.list(root, limit=10, before=before))
    assert [t.checkpoint["channel_values"]["step"] for t in page] == list(range(149, 139, -1))
    assert [t.pending_writes for t in page][0] == [("task", "out", 149)]
    assert read["heads"] == 0 and read["load_many"] == 0 and read["frames"] <= 20, read
    read.clear()
    evens = list(saver.list(root, limit=5, before=before, filter={"even": True}))
    assert [t.metadata["step"] for t in evens] == [148, 146, 144, 142, 140]
    assert read["heads"] == 0 and read["frames"] <= 20, read
    read.clear()
    # no namespace: each namespace's newest, merged; one look per namespace to find them
    anyns = list(saver.list({"configurable": {"thread_id": "t"}}, limit=4))
    assert [t.config["configurable"]["checkpoint_ns"] for t in anyns] == ["child:1"] * 3 + [""]
    assert read["heads"] == 0 and read["last_key"] == 3 and read["frames"] <= 20, read
    read.clear()
    deep = list(saver.list({"configurable": {"thread_id": "t"}}, limit=3, before=before))
    assert [t.checkpoint["channel_values"]["step"] for t in deep] == [149, 148, 147]
    assert read["heads"] == 0 and read["frames"] <= 20, read
    only = {"configurable": {"thread_id": "t", "checkpoint_id": ids[7]}}
    assert [t.metadata["step"] for t in saver.list(only)] == [7]
    assert list(saver.list(only, before={"configurable": {"checkpoint_id": ids[7]}})) == []
    assert [t.metadata["step"] for t in saver.list(only, before={"configurable": {"checkpoint_id": ids[8]}})] == [7]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_claim_that_fails_before_the_graph_runs_hands_the_interrupt_back(
    flavour: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from berth.langgraph import _SyncIO, aresume_once, resume_once

    url, sealer = f"sqlite:///{tmp_path}/b.db", _sealer()
    ran: list[Any] = []
    config = {"configurable": {"thread_id": "t1"}}
    store = berth.open_store(url, identity="ops", sealer=sealer)
    graph = _approval_graph(BerthSaver(store), ran)
    (asked,) = graph.invoke({"action": "deploy"}, config)["__interrupt__"]

    def down(self: Any, key: str, question_id: str) -> None:
        self.questions.consume(key, question_id)  # it took the question, then the backend failed
        raise berth.BackendError("the backend went away", identity="ops", key=key)

    monkeypatch.setattr(_SyncIO, "consume", down)
    with pytest.raises(berth.BackendError):
        if flavour == "sync":
            resume_once(graph, config, {asked.id: "approve"})
        else:
            asyncio.run(aresume_once(graph, config, {asked.id: "approve"}))
    monkeypatch.undo()
    kinds = {listing.key.split("/")[3] for listing in store.list("langgraph/t1/")}
    assert ran == [] and kinds == {"c"}  # no claim record, no lease left
    questions = berth.open_questions(url, identity="ops", sealer=sealer)
    assert [q.id for q, _ in questions.list("langgraph/t1/")] == [asked.id]  # asked again
    assert resume_once(graph, config, {asked.id: "approve"}) is not None and ran == ["approve"]


def test_the_sync_savers_async_calls_seal_in_pieces_in_their_worker_threads() -> None:
    # A large checkpoint sealed in the thread BerthSaver's async methods run in holds the GIL a MiB
    # at a time (berth._plan.in_pieces), so the caller's event loop runs between the pieces.
    from berth._plan import piecewise

    saver = BerthSaver(berth.open_store("memory://", identity="ops", sealer=_sealer()))

    def probe() -> Generator[Any, Any, bool]:
        return piecewise()
        yield  # a plan: a generator

    assert asyncio.run(saver._async_run(probe())) is True
    assert saver._run(probe()) is False
