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
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

__all__ = ["INLINE", "OFF_LOOP_BYTES", "Call", "Inline", "Plan", "arun", "call", "cpu", "run"]

T = TypeVar("T")


class Call(NamedTuple):
    """One I/O step: `targets[role].method(*args, **kwargs)`, awaited by the async driver."""

    role: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


Plan = Generator[Call, Any, T]


def call(role: str, method: str, *args: Any, **kwargs: Any) -> Call:
    """The step that calls `method` of the object playing `role`."""
    return Call(role, method, args, kwargs)


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
    """Run `plan` to its end, awaiting each call on the async object of its role."""
    try:
        step = next(plan)
        while True:
            try:
                result = await getattr(targets[step.role], step.method)(*step.args, **step.kwargs)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value
    finally:
        plan.close()
