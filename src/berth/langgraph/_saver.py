"""`BerthSaver` and `AsyncBerthSaver` (the `BaseCheckpointSaver` API over the plans of `_reads`,
`_writes` and `_resume`), and `resume_once` / `aresume_once`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from berth._aio_store import AsyncStore
from berth._errors import Expired
from berth._plan import InThreads, Plan, arun, in_pieces, run
from berth._store import Store
from berth.backends._aio import ThreadedBackend
from berth.langgraph._aio_io import AsyncSaverIO
from berth.langgraph._frames import DEFAULT_DEADLINE, SaverSteps
from berth.langgraph._io import SaverIO
from berth.langgraph._reads import get_tuple, list_tuples
from berth.langgraph._resume import Claim, check_deadline, claim, cleanup, delivered, release, unclaim
from berth.langgraph._writes import copy_thread, delete_for_runs, delete_thread, prune, put, put_writes

__all__ = ["AsyncBerthSaver", "BerthSaver", "aresume_once", "resume_once"]

T = TypeVar("T")


class SaverCore(BaseCheckpointSaver[Any]):
    """The savers' logic, once: every operation is a plan (`berth._plan`) over the role `SaverSteps`."""

    _sync_io: Any  # a SaverIO (tests wrap it to count the calls a read makes)
    identity: str
    prefix: str
    default_deadline: timedelta = DEFAULT_DEADLINE
    now: Callable[[], datetime]
    _async_run: Callable[[Plan[Any]], Any]
    _async_targets: Callable[[], dict[Any, Any]]
    """`SaverSteps` awaited one step at a time (`aresume_once`'s claim, which a cancellation stops between steps)."""

    def __init__(self, *, identity: str, prefix: str, serde: SerializerProtocol | None):
        super().__init__(serde=serde)
        if not isinstance(prefix, str) or (prefix and not prefix.endswith("/")) or len(prefix) > 128:
            raise ValueError(f"prefix must be '' or a str ending in '/' of at most 128 characters, got {prefix!r}")
        self.identity = identity
        self.prefix = prefix

    # -- the BaseCheckpointSaver API ----------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        return run(plan, {SaverSteps: self._sync_io})

    async def _async_read(self, plan: Plan[T]) -> T:
        """A read plan (`aget_tuple`, `alist`), awaited."""
        result: T = await self._async_run(plan)
        return result

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names, or the latest of its thread and namespace; `None` if there is none."""
        return self._run(get_tuple(self, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of `config`'s thread (and namespace when it names one), or of all threads."""
        yield from self._run(list_tuples(self, config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Seal and save `checkpoint` (one frame); return the config that names it."""
        return self._run(put(self, config, checkpoint, metadata))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Seal and save one task's pending writes of the checkpoint `config` names (one frame per task)."""
        return self._run(put_writes(self, config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of the thread."""
        return self._run(delete_thread(self, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of `run_ids`."""
        return self._run(delete_for_runs(self, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of one thread to another (resealed, bound to the target)."""
        return self._run(copy_thread(self, source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's newest checkpoint (and its writes); `delete`: delete the threads."""
        return self._run(prune(self, thread_ids, strategy))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple`, awaited."""
        result: CheckpointTuple | None = await self._async_read(get_tuple(self, config))
        return result

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list`, awaited."""
        for item in await self._async_read(list_tuples(self, config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put`, awaited."""
        stored: RunnableConfig = await self._async_run(put(self, config, checkpoint, metadata))
        return stored

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """`put_writes`, awaited."""
        await self._async_run(put_writes(self, config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread`, awaited."""
        await self._async_run(delete_thread(self, thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs`, awaited."""
        await self._async_run(delete_for_runs(self, run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread`, awaited."""
        await self._async_run(copy_thread(self, source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune`, awaited."""
        await self._async_run(prune(self, thread_ids, strategy))


class BerthSaver(SaverCore):
    """A LangGraph checkpoint saver over a `berth.Store`; its `a*` methods run the same calls in a worker thread.

    Args:
        store: the berth store (its sealer seals every checkpoint; its identity namespaces them).
        prefix: where under the store's keys the savers' frames live (`''` or ending in `/`).
        serde: LangGraph's serializer for the values inside (default: its `JsonPlusSerializer`);
            berth seals whatever it produces.
    """

    def __init__(self, store: Store, *, prefix: str = "langgraph/", serde: SerializerProtocol | None = None):
        if not isinstance(store, Store):
            raise TypeError(f"BerthSaver needs a berth.Store, got {type(store).__name__}")
        super().__init__(identity=store.identity, prefix=prefix, serde=serde)
        self.store = store
        self.now = store.now
        self._sync_io = SaverIO(store)

    async def _async_run(self, plan: Plan[T]) -> T:
        return await asyncio.to_thread(in_pieces, self._run, plan)

    def _async_targets(self) -> dict[Any, Any]:
        return {SaverSteps: InThreads(self._sync_io)}


class AsyncBerthSaver(SaverCore):
    """A LangGraph checkpoint saver over a `berth.aio.AsyncStore`; its sync methods use the store's sync twin.

    Arguments as `BerthSaver`'s.
    """

    def __init__(self, store: AsyncStore, *, prefix: str = "langgraph/", serde: SerializerProtocol | None = None):
        if not isinstance(store, AsyncStore):
            raise TypeError(f"AsyncBerthSaver needs a berth.aio.AsyncStore, got {type(store).__name__}")
        super().__init__(identity=store.identity, prefix=prefix, serde=serde)
        self.store = store
        self.now = store.now
        self._sync_io = SaverIO(store.sync)
        self._async_io = AsyncSaverIO(store)

    async def _async_run(self, plan: Plan[T]) -> T:
        return await arun(plan, {SaverSteps: self._async_io})

    def _async_targets(self) -> dict[Any, Any]:
        return {SaverSteps: self._async_io}

    async def _async_read(self, plan: Plan[T]) -> T:
        """Over a sync backend in worker threads (SQLite, file...): the whole read in one hop, on its twin.

        Awaited call by call, `aget_tuple` was ~9 hops to the backend's threads (a listing of one
        row is four: make, two pages, close) and cost 2.6x the sync `get_tuple`. The sync twin is
        the same backend and store (same connections, same checks), so the read is the same.
        """
        backend = self.store.backend
        if isinstance(backend, ThreadedBackend):
            return await backend.run_sync(self._run, plan)
        return await self._async_run(plan)


def _saver_of(graph: Any) -> SaverCore:
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, SaverCore):
        raise TypeError(
            "resume_once needs a graph compiled with checkpointer=BerthSaver(...) or AsyncBerthSaver(...), "
            f"got {type(saver).__name__}"
        )
    return saver


def resume_once(graph: Any, config: RunnableConfig, value: Any, *, deadline: timedelta = DEFAULT_DEADLINE) -> Any:
    """Resume the interrupt(s) `value` answers, for exactly one caller per interrupt.

    `value` says which interrupt it answers: LangGraph's resume map, `{interrupt_id: answer, ...}`
    (the ids are `Interrupt.id`, and the berth question's id). Each id that is pending is claimed
    on its own and the graph runs with `Command(resume=<the ids won>)`; an id not pending
    (answered already, or the thread moved on) is left out, so a retried or duplicated delivery
    of an answer never answers a later interrupt. A plain value names no interrupt: it resumes
    the thread's one pending interrupt only while that is provably the only one the thread ever
    asked (no interrupt of its namespace was resumed through `resume_once`, no other question
    is open), and otherwise resumes nothing and returns `None`.

    The claim -- one conditional write (`save(..., if_absent=True)`) per interrupt, under the thread,
    namespace, checkpoint id and interrupt id -- is the commit point, made before the graph runs:
    of any number of callers racing in any process, one wins each interrupt and gets the graph's
    output; the others, and any caller when the thread waits on no interrupt `value` answers, get
    `None`. Resumes of different interrupts of one checkpoint run one after the other (a run
    lease), so the step completes once every branch has its answer; the deadline is checked
    again once the lease is held. Anything that fails or is interrupted before the graph
    starts hands the claim back (the interrupt stays resumable); once the graph runs, an
    error leaves the claim taken.

    Args:
        graph: a compiled graph whose checkpointer is a `BerthSaver` or `AsyncBerthSaver`.
        config: the thread's config (`{"configurable": {"thread_id": ...}}`).
        value: a map of interrupt id to what `interrupt()` returns in the resumed node (or a plain value, above).
        deadline: how long after the interrupted checkpoint was written it may still be resumed.

    Raises:
        berth.Expired: the deadline passed, before the claim or while waiting for the run lease; never resumed.
        ValueError: the thread waits on several interrupts and `value` is not a resume map.
        TypeError: the graph's checkpointer is not a berth saver.
    """
    from langgraph.types import Command

    saver = _saver_of(graph)
    deadline = check_deadline(deadline)
    won = Claim()
    try:
        saver._run(claim(saver, graph.get_state(config), value, deadline, won))
    except Expired:
        saver._run(release(won))
        raise
    except BaseException:
        saver._run(unclaim(saver, won))
        raise
    if not won.resume:
        return None
    try:
        return graph.invoke(Command(resume=won.resume), config)
    finally:
        saver._run(release(won))


async def aresume_once(
    graph: Any, config: RunnableConfig, value: Any, *, deadline: timedelta = DEFAULT_DEADLINE
) -> Any:
    """`resume_once`, awaited (`graph.ainvoke`); cancelled at any await, it never loses the interrupt.

    Cancelled while it claims (`berth._plan`'s commit points): a write under way finishes, then
    whatever was claimed, consumed and leased is handed back and `CancelledError` raised; the
    interrupt stays resumable. Cancelled once it holds the run lease: the resume is the
    caller's -- the graph runs to its end and its output is returned, the cancellation withdrawn
    (as berth's integrations' wakes do), never a half-resumed run dropped.
    """
    from langgraph.types import Command

    saver = _saver_of(graph)
    deadline = check_deadline(deadline)
    snapshot = await graph.aget_state(config)
    won, targets = Claim(), saver._async_targets()
    try:
        # berth._plan's driver: from the first claim on, each write is awaited to its outcome; a
        # cancellation before the run lease is held hands back every claim, consumed question and
        # lease taken (their undo), after it the resume is the caller's
        await arun(claim(saver, snapshot, value, deadline, won), targets)
    except asyncio.CancelledError:
        raise
    except Expired:
        await cleanup(arun(release(won), targets))
        raise
    except BaseException:
        await cleanup(arun(unclaim(saver, won), targets))
        raise
    if not won.resume:
        return None
    try:
        # the graph runs to its end and its output is returned whatever happens to the caller
        # meanwhile, as berth's integrations' wakes run a resumed run: never a half-resumed run dropped
        return await delivered(graph.ainvoke(Command(resume=won.resume), config))
    finally:
        await cleanup(arun(release(won), targets))
