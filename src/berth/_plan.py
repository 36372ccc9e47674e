"""Plans: a protocol written once as a generator of calls, run by a sync or an async driver.

A step of the protocol that does I/O is a `Call` the plan yields: a role
("store", "questions", ...) and a method name with arguments. `run` makes the
call on the sync object of that role and sends the result back in; `arun`
awaits the same method of the async twin. An exception the call raises is
thrown into the plan at its `yield`, so the plan's own `try`/`except` handles
it exactly as straight-line code would. This is how `Store` and
`berth.aio.AsyncStore`, `Coordinator` and `berth.aio.Coordinator` share one
implementation of every multi-step protocol (claim, suspend, wake, the question
store's compare-and-swap loops) instead of two copies kept in step by hand.

A commit point is a step marked with `commit(step, undo=..., delivers=...)`. The sync
driver runs it as any step. The async driver runs it, and every step after it, to its
outcome whatever happens to the caller: an `asyncio` cancellation (a timeout, a TaskGroup
sibling failing) that arrives while such a step is in flight is deferred until the step's
outcome is known, because a conditional delete already sent (or running in a worker thread)
happens whether or not anyone waits for its answer. Then:

- cancelled before a commit that `delivers` succeeded: the plan stops there, the `undo` of
  every commit it won runs (newest first, itself to its outcome) -- a claim puts the run back
  under its key -- and `CancelledError` is raised;
- cancelled after it: the run is the caller's. The plan finishes (a wake consumes its
  question), its result is returned, and the deferred cancellation is withdrawn
  (`Task.uncancel`), as asyncio asks of a call that does not stop when asked to.

Before the first commit nothing has changed, so a cancellation is raised where it lands, at
no cost to the steps' ordinary awaits. `InThreads` runs a sync object's steps in worker
threads, so a plan over sync stores is awaited with the same guarantees.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "INLINE",
    "OFF_LOOP_BYTES",
    "Call",
    "InThreads",
    "Inline",
    "Plan",
    "arun",
    "call",
    "commit",
    "cpu",
    "run",
    "settle",
]

log = logging.getLogger("berth")

T = TypeVar("T")


class Call(NamedTuple):
    """One I/O step: `targets[role].method(*args, **kwargs)`, awaited by the async driver."""

    role: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    undo: Callable[[Any], Generator[Call, Any, Any]] | None = None
    """A commit point's hand-back: `undo(result)` is the plan that gives back what it took."""
    delivers: bool = False
    """A commit point after which what the plan took is the caller's (see the module docstring)."""
    commits: bool = False


Plan = Generator[Call, Any, T]


def call(role: str, method: str, *args: Any, **kwargs: Any) -> Call:
    """The step that calls `method` of the object playing `role`."""
    return Call(role, method, args, kwargs)


def commit(step: Call, *, undo: Callable[[Any], Plan[Any]] | None = None, delivers: bool = False) -> Call:
    """`step` as a commit point: awaited to its outcome however the caller is cancelled.

    `undo(result)` is the plan that hands back what the step took (a claim's: park the run again
    with `if_absent`, superseding nothing newer), run when the caller was cancelled before the
    plan delivered; `delivers`: once this step succeeded with no cancellation pending, the plan's
    result is the caller's, and a cancellation that arrives later is withdrawn, not raised.
    """
    return step._replace(undo=undo, delivers=delivers, commits=True)


OFF_LOOP_BYTES = 256 * 1024
"""States and frames at least this large are sealed and opened in a worker thread, not on the loop."""


def cpu(size: int, fn: Callable[..., T], *args: Any) -> Plan[T]:
    """`fn(*args)`, work over `size` bytes: inline when small; when large, a call of the "cpu" role,
    which `Inline` runs in place and `berth.aio` in a worker thread, off the event loop."""
    if size < OFF_LOOP_BYTES:
        return fn(*args)
    result: T = yield call("cpu", "run", fn, *args)
    return result


class Inline:
    """The sync driver's "cpu" role: runs the work where it is."""

    @staticmethod
    def run(fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)


INLINE = Inline()


def run(plan: Plan[T], targets: Mapping[str, Any]) -> T:
    """Run `plan` to its end, making each call on the sync object of its role."""
    try:
        step = next(plan)
        while True:
            try:
                result = getattr(targets[step.role], step.method)(*step.args, **step.kwargs)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value
    finally:
        plan.close()


async def arun(plan: Plan[T], targets: Mapping[str, Any]) -> T:
    """Run `plan` to its end, awaiting each call on the async object of its role.

    From its first commit point on (`commit`), each step is awaited to its outcome whatever
    happens to the caller; a cancellation in that stretch is handled as the module docstring says.
    """
    try:
        step = next(plan)
        while not step.commits:  # the path of every plan until its commit point: plain awaits
            try:
                result = await getattr(targets[step.role], step.method)(*step.args, **step.kwargs)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(result)
        return await _committing(plan, step, targets)
    except StopIteration as stop:
        value: T = stop.value
        return value
    finally:
        plan.close()


async def settle(awaitable: Awaitable[T]) -> tuple[Any, list[BaseException]]:
    """Await `awaitable` to its outcome in a task of its own, however often the caller is cancelled meanwhile
    (the task refuses the cancel a cancelled caller passes on to what it awaits).

    Returns `(task, cancellations)`: the finished task (its `result()` is the outcome, or raises
    it) and each `CancelledError` the caller received while waiting, deferred. The caller
    decides what they mean: re-raise one (after handing back what the step took), or withdraw
    each (`Task.uncancel`) and go on. Any async code with a commit point of its own can use it.
    """
    import asyncio

    step = awaitable if asyncio.iscoroutine(awaitable) else _awaited(awaitable)
    task = _held()(step, loop=asyncio.get_running_loop())
    cancellations: list[BaseException] = []
    while not task.done():
        try:
            # Awaited directly (a held task ignores the cancel a cancelled caller passes on to
            # what it awaits): one loop iteration less than a shield, and no future of its own.
            await task
        except asyncio.CancelledError as exc:
            if task.done() and task.cancelled():  # the step itself was cancelled (not by us)
                raise
            cancellations.append(exc)
        except Exception:  # the step's own failure: the caller reads it from the task
            pass
    return task, cancellations


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


_HELD: Any = None


def _held() -> Any:
    """`asyncio.Task` whose `cancel` refuses: the task `settle` runs a step in (made on first use, so
    importing this module does not import asyncio)."""
    global _HELD
    if _HELD is None:
        import asyncio

        class Held(asyncio.Task):  # type: ignore[type-arg]
            def cancel(self, msg: Any = None) -> bool:
                return False

        _HELD = Held
    return _HELD


async def _committing(plan: Plan[T], step: Call, targets: Mapping[str, Any]) -> T:
    """Run `plan` on from its first commit point, each step settled (`settle`); see the module docstring."""
    import asyncio

    undos: list[Plan[Any]] = []
    cancelled: BaseException | None = None
    delivered = False
    while True:
        task, late = await settle(getattr(targets[step.role], step.method)(*step.args, **step.kwargs))
        if late and delivered:
            # The caller has the result: withdrawn, as asyncio asks of a task that does not stop when asked.
            current = asyncio.current_task()
            for _ in late:
                current.uncancel()  # type: ignore[union-attr]
            late = []
        cancelled = cancelled or (late[0] if late else None)
        if step.commits and not delivered and task.exception() is None:
            if step.undo is not None:
                undos.append(step.undo(task.result()))
            delivered = step.delivers and cancelled is None
        if cancelled is not None and not delivered:  # cancelled before the plan delivered: hand back, raise
            plan.close()
            for undo in reversed(undos):
                handed, _ = await settle(arun(undo, targets))
                if handed.exception() is not None:
                    log.error("berth: handing back after a cancellation failed: %s", handed.exception())
            raise cancelled
        try:
            try:
                result = task.result()
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(result)
        except StopIteration as stop:  # raised out of a coroutine it would become a RuntimeError
            value: T = stop.value
            return value


class InThreads:
    """A sync object's methods awaited, each call in a worker thread: a plan over sync stores, awaited.

    `arun(plan, {"store": InThreads(store)})` runs each step of `plan` in a thread, so its commit
    points are settled as `berth.aio`'s are (a whole plan in `asyncio.to_thread` is not: cancelled,
    the thread goes on and its result, a claimed run, is dropped).
    """

    def __init__(self, target: Any):
        self.target = target

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        import asyncio

        method = getattr(self.target, name)

        async def threaded(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return threaded
