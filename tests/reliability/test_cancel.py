"""Cancellation at every await point of the commit points: no run lost, none resumed twice.

A *target* is one awaited call that may resume a parked run -- `berth.aio` `AsyncStore.claim`,
`berth.aio.Coordinator.wake`, the OpenAI Agents and pydantic-ai integrations' `wake` over
`berth.aio` stores (natively async on PostgreSQL and Redis) and over sync stores (run in worker
threads), LangGraph's `aresume_once` over an `AsyncBerthSaver` and over a `BerthSaver` -- with how
to park a run for it. Every storage call of the trial's handles (the async
backend's and its sync twin's: `put`, `get`, `delete`, ...) is an *edge* before it starts and
another after it returns; the trial parks a run, arms a cancellation at edge k and runs the target
as a task, for k = 1, 2, ... until the call finishes before its k-th edge. Armed at an edge, the
task is cancelled at once or, with `jitter`, a random few hundred microseconds later (while a call
is in flight). Then the same target, uncancelled, tries again: the run must have been resumed by
exactly one of the two. A run resumed by neither is *lost*, by both is *resumed twice*.

Adding a target is one `Target(park, resume)`: see `TARGETS`.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import random
import secrets
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import berth
import berth.aio
from berth.testing import make_envelope

from ._common import Result, Timer

EDGE_METHODS = ("put", "get", "delete", "head", "get_many", "delete_many")
IDENTITY = "cancel"


class Trigger:
    """Counts the storage edges of one trial; at the armed one, cancels the task under trial."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.edges = 0
        self.at = 0
        self.delay = 0.0
        self.task: asyncio.Task[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.landed = False

    def arm(self, task: asyncio.Task[Any], at: int, delay: float) -> None:
        with self._lock:
            self.task, self.at, self.delay, self.edges, self.landed = task, at, delay, 0, False
            self.loop = asyncio.get_running_loop()

    def disarm(self) -> int:
        with self._lock:
            self.task = None
            return self.edges

    def edge(self) -> None:
        with self._lock:
            if self.task is None:
                return
            self.edges += 1
            if self.edges != self.at or self.loop is None:
                return
            loop = self.loop
        loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        if self.delay and self.loop is not None:
            self.loop.call_later(self.delay, self._cancel)
        else:
            self._cancel()

    def _cancel(self) -> None:
        task = self.task
        if task is not None and task.cancel():
            self.landed = True


def instrument(backend: Any, trigger: Trigger) -> None:
    """Make each storage call of `backend` (sync or async) an edge before it starts and after it returns."""
    for name in EDGE_METHODS:
        method = getattr(backend, name, None)
        if method is None:
            continue
        if inspect.iscoroutinefunction(method):

            async def edged_async(*args: Any, _m: Any = method, **kwargs: Any) -> Any:
                trigger.edge()
                try:
                    return await _m(*args, **kwargs)
                finally:
                    trigger.edge()

            setattr(backend, name, edged_async)
        else:

            def edged(*args: Any, _m: Any = method, **kwargs: Any) -> Any:
                trigger.edge()
                try:
                    return _m(*args, **kwargs)
                finally:
                    trigger.edge()

            setattr(backend, name, edged)


@dataclass
class Handles:
    """One backend's `berth.aio` store and question store, their sync twins, and the trigger on all of them."""

    store: berth.aio.AsyncStore
    questions: berth.aio.AsyncQuestionStore
    trigger: Trigger
    ran: dict[str, int] = field(default_factory=dict)
    """Tool runs of the integration targets, per key."""
    asked: dict[str, str] = field(default_factory=dict)
    """The LangGraph target's interrupt id, per key."""

    @property
    def coordinator(self) -> berth.aio.Coordinator:
        return berth.aio.Coordinator(self.store, self.questions)

    def answer(self, key: str, text: str = "approve") -> None:
        questions = self.questions.sync
        pending = questions.pending(key)
        assert pending is not None, f"nothing asked at {key}"
        questions.provide(key, pending.id, text)


@asynccontextmanager
async def opened(url: str, **options: Any) -> AsyncIterator[Handles]:
    """`Handles` on the store at `url`, every storage call an edge of one `Trigger`."""
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    store = berth.aio.open_store(url, identity=IDENTITY, sealer=sealer, **options)
    if url.startswith("memory:"):  # one memory backend: the questions live beside the runs
        questions = berth.aio.AsyncQuestionStore(store.backend, identity=IDENTITY, sealer=sealer)
    else:
        questions = berth.aio.open_questions(url, identity=IDENTITY, sealer=sealer, **options)
    trigger = Trigger()
    for backend in {id(b): b for s in (store, questions) for b in _backends(s)}.values():
        instrument(backend, trigger)
    try:
        yield Handles(store, questions, trigger)
    finally:
        if not url.startswith("memory:"):
            await questions.aclose()
        await store.aclose()


def _backends(handle: Any) -> list[Any]:
    async_backend = handle.backend if isinstance(handle, berth.aio.AsyncStore) else handle._frames.backend
    return [async_backend, async_backend.sync]


# --- targets: how to park a run for a call, and the call (True: it resumed the run) -------------


@dataclass(frozen=True)
class Target:
    park: Callable[[Handles, str], Awaitable[None]]
    resume: Callable[[Handles, str], Awaitable[bool]]


async def park_run(h: Handles, key: str) -> None:
    await h.store.save(key, make_envelope(f"run:{key}"))


async def claim(h: Handles, key: str) -> bool:
    return await h.store.claim(key) is not None


async def park_asked(h: Handles, key: str) -> None:
    await h.coordinator.suspend(key, make_envelope(f"run:{key}"), "ship it?")
    await asyncio.to_thread(h.answer, key)


async def wake(h: Handles, key: str) -> bool:
    return (await h.coordinator.wake(key)).decision is berth.WakeDecision.RESUME


def _integration(module: str, sync: bool) -> Target:
    """A framework's park and wake (`berth.openai_agents` or `berth.pydantic_ai`), over aio or sync stores."""

    def handles(h: Handles) -> tuple[Any, Any]:
        return (h.store.sync, h.questions.sync) if sync else (h.store, h.questions)

    def build(h: Handles, key: str) -> Any:
        def ran(call: Any) -> None:
            h.ran[key] = h.ran.get(key, 0) + 1

        framework: Any = importlib.import_module(f"tests.test_{module}")
        return framework.build(ran)

    async def park(h: Handles, key: str) -> None:
        agent = build(h, key)
        if module == "openai_agents":
            from agents import Runner

            import berth.openai_agents as integration

            result: Any = await Runner.run(agent, "clean up the old payroll repo")
        else:
            import berth.pydantic_ai as integration  # type: ignore[no-redef]

            result = await agent.run("clean up the old payroll repo")
        await integration.park(*handles(h), key, result, agent=agent)
        await asyncio.to_thread(h.answer, f"{key}/call-1")

    async def resume(h: Handles, key: str) -> bool:
        integration: Any
        if module == "openai_agents":
            import berth.openai_agents as integration
        else:
            import berth.pydantic_ai as integration
        before = h.ran.get(key, 0)
        outcome = await integration.wake(*handles(h), key, build(h, key))
        resumed = outcome.decision is berth.WakeDecision.RESUME
        assert h.ran.get(key, 0) == before + resumed, "the approved tool runs once per RESUME"
        return resumed

    return Target(park, resume)


def _langgraph(sync_saver: bool) -> Target:
    """A one-node graph stopped on `interrupt()`, resumed with `berth.langgraph.aresume_once({id: answer})`."""

    class Ran:
        def __init__(self, h: Handles, key: str):
            self.h, self.key = h, key

        def append(self, verdict: Any) -> None:  # the node's side effect, after its interrupt()
            self.h.ran[self.key] = self.h.ran.get(self.key, 0) + 1

    def graph(h: Handles, key: str) -> Any:
        from berth.langgraph import AsyncBerthSaver, BerthSaver
        from tests.test_langgraph import _approval_graph

        saver = BerthSaver(h.store.sync) if sync_saver else AsyncBerthSaver(h.store)
        return _approval_graph(saver, Ran(h, key))  # type: ignore[arg-type]

    async def park(h: Handles, key: str) -> None:
        paused = await graph(h, key).ainvoke({"action": key}, {"configurable": {"thread_id": key}})
        h.asked[key] = paused["__interrupt__"][0].id

    async def resume(h: Handles, key: str) -> bool:
        from berth.langgraph import aresume_once

        before = h.ran.get(key, 0)
        out = await aresume_once(graph(h, key), {"configurable": {"thread_id": key}}, {h.asked[key]: "approve"})
        resumed = out is not None
        assert h.ran.get(key, 0) == before + resumed, "the node runs once per resume that returns its output"
        return resumed

    return Target(park, resume)


TARGETS: dict[str, Callable[[], Target]] = {
    "claim": lambda: Target(park_run, claim),
    "wake": lambda: Target(park_asked, wake),
    "openai_agents.wake": lambda: _integration("openai_agents", sync=False),
    "openai_agents.wake (sync stores)": lambda: _integration("openai_agents", sync=True),
    "pydantic_ai.wake": lambda: _integration("pydantic_ai", sync=False),
    "pydantic_ai.wake (sync stores)": lambda: _integration("pydantic_ai", sync=True),
    "langgraph.aresume_once": lambda: _langgraph(sync_saver=False),
    "langgraph.aresume_once (BerthSaver)": lambda: _langgraph(sync_saver=True),
}


def available(name: str) -> bool:
    """Whether target `name`'s framework is installed."""
    import importlib.util

    module = {"openai": "agents", "pydant": "pydantic_ai", "langgr": "langgraph"}.get(name[:6])
    return module is None or importlib.util.find_spec(module) is not None


# --- the trial -------------------------------------------------------------------------------------


async def sweep(h: Handles, name: str, target: Target, result: Result, *, jitter: float, rng: random.Random) -> None:
    """One key per edge k = 1, 2, ...: park, cancel the call at edge k, try again uncancelled; count."""
    k = 0
    while True:
        k += 1
        key = f"{name.split(' ')[0]}/{secrets.token_hex(6)}"
        await target.park(h, key)
        task = asyncio.ensure_future(target.resume(h, key))
        h.trigger.arm(task, k, rng.uniform(0, jitter) if jitter else 0.0)
        try:
            first = await task
        except asyncio.CancelledError:
            first = False
        except Exception as exc:  # a berth error is a failure of its own
            first = False
            result.fail(f"{name} at edge {k}: {type(exc).__name__}: {exc}")
        edges = h.trigger.disarm()
        landed = h.trigger.landed
        again = await target.resume(h, key)
        result.trials += 1
        result.counts["cancellations"] = result.counts.get("cancellations", 0) + landed
        if not first and not again:
            result.counts["lost"] = result.counts.get("lost", 0) + 1
            result.fail(f"{name}: cancelled at edge {k} of {edges}: the run was lost")
        elif first and again:
            result.counts["twice"] = result.counts.get("twice", 0) + 1
            result.fail(f"{name}: cancelled at edge {k} of {edges}: the run was resumed twice")
        if edges < k:  # the call finished before its k-th edge: every edge of it had its turn
            return


async def trial(
    backend: str, url: str, *, targets: list[str], sweeps: int, budget: float, seed: int = 7, **options: Any
) -> Result:
    """`sweeps` sweeps of every target on the store at `url` (the first without jitter, then with)."""
    result = Result("cancel: every await point of claim, wake and the integrations' wakes", backend)
    rng = random.Random(seed)
    timer = Timer(budget)
    async with opened(url, **options) as h:
        for i in range(sweeps):
            for name in targets:
                if not timer.left():
                    result.fail(f"overran the {budget:.0f} s budget after {result.trials} trials")
                    break
                await sweep(h, name, TARGETS[name](), result, jitter=0.0 if i == 0 else 0.0005, rng=rng)
    result.seconds = timer.elapsed()
    result.notes.insert(
        0,
        f"{result.counts.get('cancellations', 0):,} cancellations landed over {result.trials:,} trials of "
        f"{len(targets)} targets; {result.counts.get('lost', 0)} runs lost, "
        f"{result.counts.get('twice', 0)} resumed twice",
    )
    return result


def run_cancel(backend: str, url: str, *, sweeps: int, budget: float = 600.0, **options: Any) -> Result:
    """The trial on one backend, every target whose framework is installed (a script's entry point)."""
    targets = [name for name in TARGETS if available(name)]
    os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-a-real-key")  # nothing may reach a provider
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    with warnings.catch_warnings():
        # Redis' durability warning (the test server runs without AOF), met at the first write
        warnings.filterwarnings("ignore", message=".*can lose writes it acknowledged")
        return asyncio.run(trial(backend, url, targets=targets, sweeps=sweeps, budget=budget, **options))


def url_for(backend: str, tmp: Path, request: pytest.FixtureRequest | None = None, address: str = "") -> str:
    """A fresh store of `backend`: under `tmp` for the local ones, a fresh table or prefix on a server."""
    if backend == "memory":
        return "memory://"
    if backend == "file":
        return f"file://{tmp / 'store'}"
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'berth.db'}"
    if request is not None:
        address = request.getfixturevalue({"postgresql": "postgres_dsn", "redis": "redis_url"}[backend])
    if backend == "postgresql":
        sep = "&" if "?" in address else "?"
        return f"{address}{sep}table=cancel_{secrets.token_hex(4)}"
    return f"{address}?prefix=cancel-{secrets.token_hex(4)}:"


BACKENDS = ["memory", "file", "sqlite", "postgresql", "redis"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_cancellation_loses_a_run_or_resumes_it_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    result = run_cancel(backend, url_for(backend, tmp_path, request), sweeps=1, budget=120)
    summary = result.notes[0]
    result.notes = result.notes[1:]
    result.check()
    assert result.counts.get("cancellations", 0) >= 3 * len(TARGETS), summary  # it bit: cancels landed


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_cancellation_loses_a_run_long(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    result = run_cancel(backend, url_for(backend, tmp_path, request), sweeps=12, budget=1800)
    result.notes = result.notes[1:]
    result.check()


@pytest.mark.parametrize("name", ["claim", "wake"])
def test_the_trial_catches_a_commit_point_that_drops_its_run(name: str, tmp_path: Path) -> None:
    """The checker has teeth: a claim or wake run as a whole in a worker thread (as the integrations'
    wakes on sync stores were) loses runs when cancelled."""

    async def in_a_thread(h: Handles, key: str) -> bool:
        if name == "claim":
            return await asyncio.to_thread(h.store.sync.claim, key) is not None
        coordinator = berth.Coordinator(h.store.sync, h.questions.sync)
        woke = await asyncio.to_thread(coordinator.wake, key)
        return woke.decision is berth.WakeDecision.RESUME

    park = park_run if name == "claim" else park_asked
    TARGETS["dropping"] = lambda: Target(park, in_a_thread)
    try:
        result = asyncio.run(trial("memory", "memory://", targets=["dropping"], sweeps=3, budget=60))
    finally:
        del TARGETS["dropping"]
    assert result.counts.get("lost", 0) > 0, result.notes


# --- what a cancelled claim or wake does, one case at a time ------------------------------------


class Hooked(berth.backends._aio.ThreadedBackend):
    """A memory backend in worker threads whose delete of a frame calls `after` (the run's, or with `questions`
    a question record's) once it deleted."""

    after: Callable[[], Awaitable[None]] | None = None
    questions = False

    async def delete(self, name: str, token: berth.Token) -> None:
        await super().delete(name, token)
        if self.after is not None and (name != f"{IDENTITY}/k") is self.questions:
            await self.after()


async def _until_cancelled(task: asyncio.Task[Any]) -> None:
    while not task.cancelling():  # the cancellation has been requested of the caller: on the loop, no clock
        await asyncio.sleep(0)


def _handles() -> tuple[Hooked, berth.aio.AsyncStore, berth.aio.AsyncQuestionStore, berth.aio.Coordinator]:
    from berth.backends.memory import MemoryBackend

    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    backend = Hooked(MemoryBackend())
    store = berth.aio.AsyncStore(backend, identity=IDENTITY, sealer=sealer)
    questions = berth.aio.AsyncQuestionStore(backend, identity=IDENTITY, sealer=sealer)
    return backend, store, questions, berth.aio.Coordinator(store, questions)


async def _park_answered(coordinator: berth.aio.Coordinator, questions: berth.aio.AsyncQuestionStore) -> None:
    await coordinator.suspend("k", make_envelope("r1"), "ship it?")
    pending = await questions.pending("k")
    assert pending is not None
    await questions.provide("k", pending.id, "yes")


def test_a_claim_timed_out_after_its_delete_parks_the_run_again() -> None:
    async def main() -> None:
        backend, store, _, _ = _handles()
        await store.save("k", make_envelope("r1"))
        me = asyncio.current_task()
        assert me is not None
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as deadline:

                async def expire() -> None:  # the deadline passes once the delete has taken the run
                    deadline.reschedule(asyncio.get_running_loop().time())
                    await _until_cancelled(me)

                backend.after = expire
                await store.claim("k")
        assert me.cancelling() == 0, "the timeout's cancellation is accounted for"
        backend.after = None
        again = await store.claim("k")
        assert again is not None and again.run_id == "r1", "the run was handed back"

    asyncio.run(main())


def test_a_wake_cancelled_by_a_failing_sibling_leaves_the_run_and_its_answer() -> None:
    async def main() -> None:
        backend, store, questions, coordinator = _handles()
        await _park_answered(coordinator, questions)
        deleted = asyncio.Event()

        async def hold() -> None:
            deleted.set()
            await _until_cancelled(waker)

        async def sibling() -> None:
            await deleted.wait()
            raise RuntimeError("a sibling failed")

        backend.after = hold
        with pytest.raises(ExceptionGroup) as caught:
            async with asyncio.TaskGroup() as group:
                waker = group.create_task(coordinator.wake("k"))
                group.create_task(sibling())
        assert [type(e) for e in caught.value.exceptions] == [RuntimeError]
        assert waker.cancelled()
        backend.after = None
        woke = await coordinator.wake("k")
        assert woke.decision is berth.WakeDecision.RESUME and woke.envelope is not None
        assert woke.envelope.run_id == "r1" and woke.answer is not None and woke.answer.text == "yes"

    asyncio.run(main())


def test_a_wake_cancelled_after_its_delete_delivers_the_run() -> None:
    """Cancelled while its question is consumed (after the commit point), a wake returns RESUME."""

    async def main() -> None:
        backend, store, questions, coordinator = _handles()
        await _park_answered(coordinator, questions)
        me = asyncio.current_task()
        assert me is not None
        expired: list[bool] = []

        async def expire() -> None:  # the deadline passes while the question is consumed
            deadline.reschedule(asyncio.get_running_loop().time())
            await _until_cancelled(me)
            expired.append(True)

        backend.after, backend.questions = expire, True
        async with asyncio.timeout(None) as deadline:
            woke = await coordinator.wake("k")
        assert expired and woke.decision is berth.WakeDecision.RESUME
        assert me.cancelling() == 0, "the cancellation was withdrawn"
        backend.after = None
        assert await store.load("k") is None and await questions.pending("k") is None

    asyncio.run(main())


def test_a_cancelled_claim_never_puts_back_over_a_newer_run() -> None:
    async def main() -> None:
        backend, store, _, _ = _handles()
        await store.save("k", make_envelope("r1"))

        async def resave_then_cancel() -> None:
            await store.save("k", make_envelope("r2"))  # parked again while the claim holds r1
            claimer.cancel()
            await _until_cancelled(claimer)

        backend.after = resave_then_cancel
        claimer = asyncio.ensure_future(store.claim("k"))
        with pytest.raises(asyncio.CancelledError):
            await claimer
        backend.after = None
        again = await store.claim("k")
        assert again is not None and again.run_id == "r2"
        assert await store.claim("k") is None

    asyncio.run(main())
