"""Plans: a protocol written once as a generator of typed steps, run by a sync or an async driver.

A step of the protocol that does I/O is a `Step`: a method of a *role* -- a `typing.Protocol`
marked with `@role`, such as the store's `StoreSteps` -- with its arguments, built by
`step(StoreSteps.claim_load, key)`. The plan takes its result with `yield from`:

    parked, seen = yield from step(StoreSteps.claim_load, key)

`step` is typed with a ParamSpec over the protocol's method, so mypy checks the arguments and
types the result (here `tuple[Parked | None, object]`), and go-to-definition lands on the
protocol's method, which says what the step does. `run(plan, {StoreSteps: target, ...})` calls
that method of the sync object playing the role and sends the result back in; `arun` awaits the
same method of the async object. The protocol is shared by both sides: the sync object
implements it as written, the async one with each method `async` (a Protocol cannot say "the
same methods, awaited", so the async side is checked by the shared tests, not by mypy). An
exception the call raises is thrown into the plan at its `yield`, so the plan's own
`try`/`except` handles it exactly as straight-line code would. This is how `Store` and
`berth.aio.AsyncStore`, `Coordinator` and `berth.aio.Coordinator` share one implementation of
every multi-step protocol (claim, suspend, wake, the witness's writes, the question store's
compare-and-swap loops) instead of two copies kept in step by hand.

Why `yield from` a step object rather than `yield` it: a generator's send type is one type for
the whole plan, so a plain `yield` can only hand back `Any`; `Step.__iter__` is a one-step
generator whose return type is the method's, so each result is typed where it is taken. It costs
one small generator per step (a few hundred nanoseconds a claim; measured in docs/store.md).
`call(role, "method", ...)` is the untyped spelling for roles that have no protocol yet.

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

import functools
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping
from contextvars import ContextVar, copy_context
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

__all__ = [
    "INLINE",
    "OFF_LOOP_BYTES",
    "Call",
    "Cpu",
    "InThreads",
    "Inline",
    "Plan",
    "Step",
    "arun",
    "call",
    "commit",
    "cpu",
    "in_pieces",
    "piecewise",
    "role",
    "run",
    "settle",
    "step",
]

log = logging.getLogger("berth")

T = TypeVar("T")


P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


class Step(Generic[R]):
    """One I/O step: `targets[role].method(*args, **kwargs)`, awaited by the async driver.

    `yield from` it in a plan: the result comes back typed `R` (see the module docstring).
    """

    __slots__ = ("args", "commits", "delivers", "kwargs", "method", "role", "undo")

    def __init__(
        self,
        role: object,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        undo: Callable[[Any], Plan[Any]] | None = None,
        delivers: bool = False,
    ):
        self.role = role
        """The protocol class (or, for `call`, the name) whose target the driver calls."""
        self.method = method
        self.args = args
        self.kwargs = kwargs
        self.undo = undo
        """A commit point's hand-back: `undo(result)` is the plan that gives back what it took."""
        self.delivers = delivers
        """A commit point after which what the plan took is the caller's (see the module docstring)."""
        self.commits = False

    def __iter__(self) -> Generator[Step[Any], Any, R]:
        result: R = yield self
        return result

    def __repr__(self) -> str:
        role = getattr(self.role, "__name__", self.role)
        return f"Step({role}.{self.method}, args={self.args!r}, kwargs={self.kwargs!r})"


Call = Step
"""The step type under its first name (the Redis backend's plans)."""

Plan = Generator[Step[Any], Any, T]

_ROLES: dict[Any, tuple[type, str]] = {}  # a role's method (the function object) -> (role, its name)


def role(cls: C) -> C:
    """Mark a `Protocol` as a role of plans: each of its public methods (and `__call__`) can be a `step`."""
    for name, fn in vars(cls).items():
        if callable(fn) and (not name.startswith("_") or name == "__call__"):
            _ROLES[fn] = (cls, name)
    return cls


def step(method: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs) -> Step[R]:
    """The step that calls `method` (a method of a `@role` protocol, e.g. `StoreSteps.remove`) of the
    object playing that role; `yield from` it to take its typed result."""
    try:
        owner, name = _ROLES[method]
    except KeyError:
        raise TypeError(f"{method!r} is not a method of a @role protocol") from None
    return Step(owner, name, args, kwargs)


def call(role: str, method: str, *args: Any, **kwargs: Any) -> Step[Any]:
    """The untyped step that calls `method` of the object playing `role` (a name): for roles with no protocol."""
    return Step(role, method, args, kwargs)


def commit(step: Step[R], *, undo: Callable[[R], Plan[Any]] | None = None, delivers: bool = False) -> Step[R]:
    """`step` as a commit point: awaited to its outcome however the caller is cancelled.

    `undo(result)` is the plan that hands back what the step took (a claim's: park the run again
    with `if_absent`, superseding nothing newer), run when the caller was cancelled before the
    plan delivered; `delivers`: once this step succeeded with no cancellation pending, the plan's
    result is the caller's, and a cancellation that arrives later is withdrawn, not raised.
    """
    marked: Step[R] = Step(step.role, step.method, step.args, step.kwargs, undo, delivers)
    marked.commits = True
    return marked


OFF_LOOP_BYTES = 256 * 1024
"""States and frames at least this large are sealed and opened in a worker thread, not on the loop."""


@role
class Cpu(Protocol):
    """The role that runs CPU-bound work over many bytes: in place (`INLINE`), or off an event loop."""

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`."""
        ...


def cpu(size: int, fn: Callable[..., T], *args: Any) -> Plan[T]:
    """`fn(*args)`, work over `size` bytes: inline when small; when large, a step of the `Cpu` role,
    which `INLINE` runs in place and `berth.aio` in a worker thread, off the event loop."""
    if size < OFF_LOOP_BYTES:
        return fn(*args)
    result: T = yield Step(Cpu, "run", (fn, *args), {})
    return result


_PIECEWISE: ContextVar[bool] = ContextVar("berth_piecewise", default=False)


def in_pieces(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread an event loop awaits: large bodies sealed and opened in pieces.

    A thread frees the event loop only while it does not hold the GIL. In pieces
    (`berth._aesgcm`), a large body's buffer is grown a MiB at a time and each MiB is
    its own cipher call, so the loop runs between them; the price is one more pass over
    the body (~25 % of a 16 MiB seal + open). Elsewhere (the sync API) a large body is
    sealed into one buffer of its final size and a large state decrypted in one call,
    as fast as cryptography's `AESGCM` called directly.
    """
    return copy_context().run(_in_pieces, fn, args)


def _in_pieces(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    _PIECEWISE.set(True)  # in the copy `in_pieces` made: the caller's context is untouched
    return fn(*args)


def piecewise() -> bool:
    """Whether large bodies are sealed and opened in pieces here (inside `in_pieces`)."""
    return _PIECEWISE.get()


class Inline:
    """The sync driver's `Cpu` role: runs the work where it is."""

    @staticmethod
    def run(fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)


INLINE = Inline()


def run(plan: Plan[T], targets: Mapping[Any, Any]) -> T:
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


async def arun(plan: Plan[T], targets: Mapping[Any, Any]) -> T:
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


async def _committing(plan: Plan[T], step: Step[Any], targets: Mapping[Any, Any]) -> T:
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

    `arun(plan, {StoreSteps: InThreads(store.steps)})` runs each step of `plan` in a thread, so its commit
    points are settled as `berth.aio`'s are (a whole plan in `asyncio.to_thread` is not: cancelled,
    the thread goes on and its result, a claimed run, is dropped).
    """

    def __init__(self, target: Any):
        self.target = target

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        import asyncio

        method = getattr(self.target, name)

        async def threaded(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(in_pieces, functools.partial(method, *args, **kwargs))

        return threaded
