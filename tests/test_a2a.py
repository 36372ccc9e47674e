"""berth.a2a.BerthTaskStore against the real a2a-sdk: sealed, owner-bound, compare-and-set, deadlines fail closed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth
import berth.aio
from tests.conftest import require

pytest.importorskip("a2a", reason="berth.a2a needs the a2a extra")

from a2a.auth.user import User  # noqa: E402
from a2a.server.context import ServerCallContext  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    AuthenticationInfo,
    ListTasksRequest,
    Message,
    Part,
    Role,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)

from berth.a2a import BerthPushNotificationConfigStore, BerthTaskStore, ConcurrentTaskModificationError  # noqa: E402

KEYRING = berth.Keyring.generate()
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class Person(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def ctx(name: str = "alice") -> ServerCallContext:
    return ServerCallContext(user=Person(name))


def task(task_id: str = "t-1", state: Any = TaskState.TASK_STATE_WORKING, *, context_id: str = "c-1") -> Task:
    t = Task(id=task_id, context_id=context_id, status=TaskStatus(state=state))
    t.status.timestamp.FromDatetime(T0)
    return t


def note(text: str) -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("redis", marks=pytest.mark.redis)])  # fmt: skip
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind = request.param
    if kind == "memory":
        yield f"memory://a2a-{uuid.uuid4().hex}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/berth.db"
    elif kind == "postgresql":
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = f"berth_a2a_{uuid.uuid4().hex[:12]}"
        yield f"{dsn}?schema={schema}"
        psycopg = require("psycopg", "PostgreSQL")
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix = f"berth-a2a-{uuid.uuid4().hex[:12]}:"
        yield f"{redis_url}?prefix={prefix}&check_durability=false"
        redis = require("redis", "Redis")
        admin = redis.Redis.from_url(redis_url)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


def run(url: str, body: Callable[[BerthTaskStore, Clock], Any], *, sealer: berth.Sealer | None = None) -> Any:
    clock = Clock()

    async def main() -> Any:
        opened = berth.aio.open_store(
            url, identity="helpdesk", sealer=sealer or berth.AesGcmSealer(KEYRING), clock=clock
        )
        async with opened as astore:
            return await body(BerthTaskStore(astore), clock)

    return asyncio.run(main())


def test_every_method_round_trips(url: str) -> None:
    async def body(store: BerthTaskStore, clock: Clock) -> None:
        first, second = task("t-1"), task("t-2", TaskState.TASK_STATE_COMPLETED, context_id="c-2")
        second.status.timestamp.FromDatetime(T0 + timedelta(minutes=1))
        first.history.append(note("hello"))
        await store.save(first, ctx())
        await store.save(second, ctx())
        assert await store.get("t-1", ctx()) == first
        listed = await store.list(ListTasksRequest(), ctx())
        assert [t.id for t in listed.tasks] == ["t-2", "t-1"] and listed.total_size == 2  # newest status first
        assert [t.id for t in (await store.list(ListTasksRequest(context_id="c-1"), ctx())).tasks] == ["t-1"]
        only = ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED)
        assert [t.id for t in (await store.list(only, ctx())).tasks] == ["t-2"]
        recent = ListTasksRequest()
        recent.status_timestamp_after.FromDatetime(T0 + timedelta(seconds=30))
        assert [t.id for t in (await store.list(recent, ctx())).tasks] == ["t-2"]
        page = await store.list(ListTasksRequest(page_size=1), ctx())
        assert [t.id for t in page.tasks] == ["t-2"] and page.next_page_token
        rest = await store.list(ListTasksRequest(page_size=1, page_token=page.next_page_token), ctx())
        assert [t.id for t in rest.tasks] == ["t-1"] and not rest.next_page_token
        c = ctx()
        await store.get("t-1", c)
        await store.delete("t-1", c)
        await store.delete("t-2", ctx())  # without a read first: deletes what it loads
        await store.delete("t-3", ctx())  # nothing there: nothing to do, as the SDK's stores
        assert await store.get("t-1", ctx()) is None and (await store.list(ListTasksRequest(), ctx())).total_size == 0

    run(url, body)


def test_a_task_is_its_owners_alone(url: str) -> None:
    async def body(store: BerthTaskStore, clock: Clock) -> None:
        await store.save(task("t-1"), ctx("alice"))
        assert await store.get("t-1", ctx("mallory")) is None
        assert (await store.list(ListTasksRequest(), ctx("mallory"))).total_size == 0
        await store.delete("t-1", ctx("mallory"))  # mallory's own (empty) partition: alice's task stays
        assert await store.get("t-1", ctx("alice")) is not None
        assert await store.get("t-1", ctx("")) is None  # the unauthenticated user is an owner of its own

    run(url, body)


def test_the_loser_of_a_concurrent_update_is_told_and_nothing_is_lost(url: str) -> None:
    async def body(store: BerthTaskStore, clock: Clock) -> None:
        await store.save(task("t-1"), ctx())
        a, b = ctx(), ctx()
        ta, tb = await store.get("t-1", a), await store.get("t-1", b)
        assert ta is not None and tb is not None
        ta.history.append(note("from a"))
        tb.history.append(note("from b"))
        await store.save(ta, a)
        with pytest.raises(ConcurrentTaskModificationError, match=r"t-1.*identity 'helpdesk'.*retry") as lost:
            await store.save(tb, b)
        assert isinstance(lost.value.__cause__, berth.TokenMismatch)
        again = await store.get("t-1", ctx())
        assert again is not None and [m.parts[0].text for m in again.history] == ["from a"]
        with pytest.raises(ConcurrentTaskModificationError):  # a first write never overwrites a task there
            await store.save(task("t-1"), ctx())
        with pytest.raises(ConcurrentTaskModificationError):  # nor does a delete of what changed since
            await store.delete("t-1", b)

    run(url, body)


def test_concurrent_updates_from_eight_workers_lose_none(url: str) -> None:
    written, kept, conflicts = concurrent_updates(url, workers=8, updates=48)
    assert (written, kept) == (48, 48) and conflicts > 0  # the race was real, and every loser was told


async def _update_once(store: BerthTaskStore, task_id: str, label: str) -> int:
    """Append one message to the task, retrying until this worker's update is the one written; returns conflicts."""
    conflicts = 0
    while True:
        c = ctx()
        current = await store.get(task_id, c)
        assert current is not None
        current.history.append(note(label))
        try:
            await store.save(current, c)
            return conflicts
        except ConcurrentTaskModificationError:
            conflicts += 1


def concurrent_updates(url: str, *, workers: int, updates: int) -> tuple[int, int, int]:
    """`updates` appends to one task from `workers` workers, each over a store of its own (a replica).

    Returns the appends the final task holds, how many of them are distinct, and the conflicts the losers were told.
    """
    task_id, sealer = f"t-{uuid.uuid4().hex}", berth.AesGcmSealer(KEYRING)

    async def main() -> tuple[int, int, int]:
        stores = [berth.aio.open_store(url, identity="helpdesk", sealer=sealer) for _ in range(workers)]
        try:
            first = BerthTaskStore(stores[0])
            await first.save(task(task_id), ctx())
            queue = iter(range(updates))

            async def worker(store: BerthTaskStore) -> int:
                return sum([await _update_once(store, task_id, f"update-{i}") for i in queue])

            told = await asyncio.gather(*(worker(BerthTaskStore(s)) for s in stores))
            final = await first.get(task_id, ctx())
            assert final is not None
            texts = [m.parts[0].text for m in final.history]
            return len(texts), len(set(texts)), sum(told)
        finally:
            for s in stores:
                await s.aclose()

    return asyncio.run(main())


def test_input_required_fails_closed_at_its_deadline(url: str) -> None:
    async def body(store: BerthTaskStore, clock: Clock) -> None:
        await store.save(task("t-1", TaskState.TASK_STATE_INPUT_REQUIRED), ctx())
        await store.save(task("t-2"), ctx())  # working: no deadline
        c = ctx()
        waiting = await store.get("t-1", c)
        assert waiting is not None
        clock.now = T0 + timedelta(days=10)
        waiting.history.append(note("still waiting"))
        await store.save(waiting, c)  # still input-required: the deadline is kept, never pushed out
        clock.now = T0 + timedelta(days=14, seconds=1)
        assert await store.get("t-1", ctx()) is None  # the SDK's not-found: never handed out to resume
        assert [t.id for t in (await store.list(ListTasksRequest(), ctx())).tasks] == ["t-2"]
        late = ctx()
        assert await store.get("t-1", late) is None
        with pytest.raises(ConcurrentTaskModificationError):  # nor answered over
            await store.save(task("t-1", TaskState.TASK_STATE_WORKING), late)
        assert await store.get("t-2", ctx()) is not None
        assert await store.store.sweep() == 1

    run(url, body)


def _frames(url: str) -> tuple[berth.Store, list[str]]:
    raw = berth.open_store(url, identity="helpdesk", sealer=berth.AesGcmSealer(KEYRING))
    return raw, sorted(listing.key for listing in raw.list("a2a/tasks/"))


def test_tampered_moved_and_planted_tasks_are_refused(url: str) -> None:
    run(url, lambda store, clock: store.save(task("t-1"), ctx("alice")))
    raw, keys = _frames(url)
    assert keys == ["a2a/tasks/alice/t-1"]
    backend = raw.backend
    name = raw.core.name(keys[0])
    stored, _ = backend.get(name)
    frame = bytes(stored)
    # moved: alice's frame copied under mallory's key (and under another task id)
    for other in ("a2a/tasks/mallory/t-1", "a2a/tasks/alice/t-9"):
        backend.put(raw.core.name(other), frame)
    # planted: a plaintext frame that names bob and t-5 under bob's key
    planted = berth.open_store(url, identity="helpdesk", sealer=berth.PlaintextSealer())
    envelope = berth.Envelope(provider_state=b'{"owner":"bob","task_id":"t-5","task":{"id":"t-5"}}', provider="a2a")
    planted.save("a2a/tasks/bob/t-5", envelope)
    # tampered: one body byte flipped
    backend.put(name, frame[:-1] + bytes([frame[-1] ^ 1]))
    raw.close()
    planted.close()

    async def body(store: BerthTaskStore, clock: Clock) -> None:
        for who, task_id in (("alice", "t-1"), ("mallory", "t-1"), ("alice", "t-9"), ("bob", "t-5")):
            with pytest.raises(berth.IntegrityError, match="identity 'helpdesk'"):
                await store.get(task_id, ctx(who))
        with pytest.raises(berth.IntegrityError):
            await store.list(ListTasksRequest(), ctx("bob"))

    run(url, body)


def test_a_sealed_frame_naming_another_owner_is_refused() -> None:
    url = f"memory://a2a-{uuid.uuid4().hex}"
    sealed = berth.open_store(url, identity="helpdesk", sealer=berth.AesGcmSealer(KEYRING))
    body = b'{"owner":"alice","task_id":"t-1","task":{"id":"t-1"}}'
    sealed.save("a2a/tasks/mallory/t-1", berth.Envelope(provider_state=body, provider="a2a"))
    sealed.save("a2a/tasks/mallory/t-2", berth.Envelope(provider_state=b'{"not": "a task"}', provider="a2a"))

    async def check(store: BerthTaskStore, clock: Clock) -> None:
        with pytest.raises(berth.IntegrityError, match="another owner or task"):
            await store.get("t-1", ctx("mallory"))
        with pytest.raises(berth.IntegrityError, match="not an A2A task"):
            await store.get("t-2", ctx("mallory"))

    run(url, check)


def test_plaintext_is_readable_only_where_chosen_and_keys_escape_owners() -> None:
    url = f"memory://a2a-{uuid.uuid4().hex}"
    run(url, lambda store, clock: store.save(task("t/1"), ctx("a b/../c" + "x" * 200)),
        sealer=berth.PlaintextSealer())  # fmt: skip
    raw = berth.open_store(url, identity="helpdesk", sealer=berth.PlaintextSealer())
    [key] = [listing.key for listing in raw.list("a2a/tasks/")]
    assert key.startswith("a2a/tasks/~h") and key.endswith("/t~2F1")  # one segment each, whatever the name

    async def back(store: BerthTaskStore, clock: Clock) -> None:
        assert await store.get("t/1", ctx("a b/../c" + "x" * 200)) is not None

    run(url, back, sealer=berth.PlaintextSealer())


def test_bad_arguments_are_refused_before_any_io() -> None:
    async def body() -> None:
        async with berth.aio.open_store("memory://", identity="h", sealer=berth.AesGcmSealer(KEYRING)) as astore:
            with pytest.raises(ValueError, match="input_deadline"):
                BerthTaskStore(astore, input_deadline=timedelta(0))
            with pytest.raises(ValueError, match="prefix"):
                BerthTaskStore(astore, prefix="a2a")
            with pytest.raises(ValueError, match="non-empty"):
                await BerthTaskStore(astore).get("", ctx())
            with pytest.raises(Exception, match="page token"):
                await BerthTaskStore(astore).list(ListTasksRequest(page_token="bogus"), ctx())

    with pytest.raises(TypeError, match="berth.aio.AsyncStore"):
        BerthTaskStore(berth.open_store("memory://", identity="h", sealer=berth.AesGcmSealer(KEYRING)))  # type: ignore[arg-type]
    asyncio.run(body())


def test_import_berth_does_not_import_a2a() -> None:
    code = "import sys, berth, berth.aio; assert not any(m == 'a2a' or m.startswith('a2a.') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def hook(config_id: str = "", url: str = "https://hooks.example/a2a") -> TaskPushNotificationConfig:
    auth = AuthenticationInfo(scheme="Bearer", credentials="s3cret-hook-token")
    return TaskPushNotificationConfig(id=config_id, url=url, token="tok", authentication=auth)


def test_push_configs_round_trip_sealed_and_owner_bound(url: str) -> None:
    async def body(astore: berth.aio.AsyncStore) -> None:
        store = BerthPushNotificationConfigStore(astore)
        given = hook()
        stored = await store.set_info("t-1", given, ctx("alice"))
        assert (stored.id, stored.task_id) == ("t-1", "t-1") and given.id == ""  # normalized copy, input untouched
        await store.set_info("t-1", hook("second", "https://other.example/"), ctx("alice"))
        await store.set_info("t-1", hook("second", "https://newer.example/"), ctx("alice"))  # same id: replaced
        await store.set_info("t-1", hook("bobs"), ctx("bob"))
        await store.set_info("t-2", hook("elsewhere"), ctx("alice"))
        mine = await store.get_info("t-1", ctx("alice"))
        assert sorted((c.id, c.url) for c in mine) == [("second", "https://newer.example/"), ("t-1", given.url)]
        assert mine[0].authentication.credentials == "s3cret-hook-token"
        assert [c.id for c in await store.get_info("t-1", ctx("bob"))] == ["bobs"]
        assert sorted(c.id for c in await store.get_info_for_dispatch("t-1")) == ["bobs", "second", "t-1"]
        await store.delete_info("t-1", ctx("bob"), "t-1")  # bob cannot delete alice's
        await store.delete_info("t-1", ctx("alice"), "second")
        assert [c.id for c in await store.get_info("t-1", ctx("alice"))] == ["t-1"]
        await store.delete_info("t-1", ctx("alice"))
        assert await store.get_info("t-1", ctx("alice")) == [] and len(await store.get_info_for_dispatch("t-1")) == 1
        assert [c.id for c in await store.get_info("t-2", ctx("alice"))] == ["elsewhere"]

    async def main() -> None:
        async with berth.aio.open_store(url, identity="helpdesk", sealer=berth.AesGcmSealer(KEYRING)) as astore:
            await body(astore)

    asyncio.run(main())
    raw = berth.open_store(url, identity="helpdesk", sealer=berth.AesGcmSealer(KEYRING))
    for listing in raw.list("a2a/push/"):
        assert b"s3cret-hook-token" not in bytes(raw.backend.get(raw.core.name(listing.key))[0])  # sealed at rest
    raw.close()


def test_a_moved_or_planted_push_config_is_refused() -> None:
    url = f"memory://a2a-{uuid.uuid4().hex}"

    async def main() -> None:
        async with berth.aio.open_store(url, identity="helpdesk", sealer=berth.PlaintextSealer()) as astore:
            store = BerthPushNotificationConfigStore(astore)
            await store.set_info("t-1", hook("h"), ctx("alice"))
            parked = await astore.load("a2a/push/t-1/alice/h")
            assert parked is not None
            await astore.save("a2a/push/t-1/mallory/h", parked.envelope)  # plaintext: the body names alice
            with pytest.raises(berth.IntegrityError, match="another owner or config"):
                await store.get_info("t-1", ctx("mallory"))
            with pytest.raises(berth.IntegrityError):
                await store.get_info_for_dispatch("t-1")
            with pytest.raises(TypeError, match="berth.aio.AsyncStore"):
                BerthPushNotificationConfigStore(astore.sync)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="prefix"):
                BerthPushNotificationConfigStore(astore, prefix="p")
            with pytest.raises(ValueError, match="non-empty"):
                await store.get_info("", ctx())

    asyncio.run(main())
