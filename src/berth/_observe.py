"""Traces, metrics and DEBUG logs of every public store, question and coordinator call (docs/observability.md).

Decided once per store, at open (`instrument`, called by each shell's constructor): when no
OpenTelemetry SDK is configured -- `opentelemetry` not imported, or only the API's own proxy or
no-op providers in place -- and the logger `berth.<kind>` is not at DEBUG, nothing is wrapped
and every call costs what it did without this module (berth never imports `opentelemetry`
itself: a process that configured an SDK has imported it already). Otherwise each operation
named in `OPERATIONS` is replaced, on that instance only, by a wrapper that opens a span
`berth.<kind>.<operation>`, times the call, and records its outcome: on the span, in the
metrics, and in one DEBUG line. A span, a metric or a log line carries the backend's scheme,
the identity, the outcome, a count and an error's class name: never a key, a state, a prompt
or an answer, and never an error's message (it names the key).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from berth._errors import (
    BackendError,
    BerthError,
    ConfigDrift,
    Expired,
    FormatError,
    IntegrityError,
    TokenMismatch,
)
from berth.backends import registry

__all__ = ["ITERATES", "OPERATIONS", "instrument", "outcome_of_error", "scheme_of"]

Outcome = Callable[[Any], "tuple[str, BaseException | None]"]
"""What a call that returned did: its outcome's word, and an error it met without raising (a wake's)."""


def _says(word: str) -> Outcome:
    return lambda _result: (word, None)


def _either(yes: str, no: str) -> Outcome:
    return lambda result: (yes if result else no, None)


def _found(result: Any) -> tuple[str, BaseException | None]:
    return ("absent" if result is None else "found", None)


def _audited(report: Any) -> tuple[str, BaseException | None]:
    return ("ok" if report.ok else "findings", None)


def _woken(wake: Any) -> tuple[str, BaseException | None]:
    return (str(wake.decision), wake.error)


ITERATES = _says("listed")
"""The outcome of an operation that returns an iterator: its span lasts until the iteration ends."""

_CLAIMED = _either("claimed", "not_claimed")

OPERATIONS: Mapping[str, Mapping[str, Outcome]] = {
    "store": {
        "save": _says("saved"),
        "save_many": _says("saved"),
        "load": _found,
        "load_many": _says("loaded"),
        "delete": _says("deleted"),
        "claim": _CLAIMED,
        "list": ITERATES,
        "load_prefix": ITERATES,
        "delete_prefix": _says("deleted"),
        "sweep": _says("swept"),
        "reseal": _says("resealed"),
        "adopt": _says("adopted"),
        "acknowledge": _either("acknowledged", "unchanged"),
        "audit": _audited,
        "setup": _says("ok"),
    },
    "questions": {
        "ask": _says("asked"),
        "pending": _found,
        "answer": _found,
        "record": _found,
        "headers": ITERATES,
        "provide": _says("provided"),
        "consume": _either("consumed", "not_consumed"),
        "list": ITERATES,
        "sweep": _says("swept"),
    },
    "coordinator": {
        "suspend": _says("suspended"),
        "wake": _woken,
    },
}
"""Every traced operation of each kind of object, and how its result reads as an outcome."""

# an error's outcome: the first class in this order it is an instance of
_ERROR_OUTCOMES: tuple[tuple[type[BaseException], str], ...] = (
    (TokenMismatch, "conflict"),
    (Expired, "expired"),
    (IntegrityError, "integrity_failure"),
    (FormatError, "format_error"),
    (ConfigDrift, "config_drift"),
    (BackendError, "backend_error"),
    (BerthError, "refused"),
)
# the outcomes that also count in a counter of their own, and the counter's name
# seconds: a memory-backend call takes tens of microseconds, a cloud store's up to seconds
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_COUNTED = {"conflict": "berth.conflicts", "expired": "berth.expiries", "integrity_failure": "berth.integrity_failures"}


def outcome_of_error(exc: BaseException) -> str:
    """The outcome a call that raised `exc` records (`conflict`, `expired`, ..., `error`)."""
    for cls, word in _ERROR_OUTCOMES:
        if isinstance(exc, cls):
            return word
    asyncio = sys.modules.get("asyncio")  # a sync store never imports it: a cancellation is only asyncio's
    if asyncio is not None and isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "error"


def scheme_of(backend: object) -> str:
    """The URL scheme a backend was registered under (`memory`, `postgres`), else its class's name."""
    for candidate in (backend, getattr(backend, "sync", None)):
        cls = type(candidate)
        target = f"{cls.__module__}:{cls.__qualname__}"
        for scheme, entry in registry.items():
            if target in (entry.target, entry.async_target):
                return scheme
    return type(backend).__name__


def _configured(provider: object, api: str) -> bool:
    """Whether `provider` is a real one (an SDK's), not the API's proxy or no-op."""
    return not type(provider).__module__.startswith(api)


class _Observer:
    """What one kind of operation records to: a tracer, metric instruments, a logger (each may be absent)."""

    def __init__(self, kind: str, tracer: Any, meter: Any, log: logging.Logger | None):
        self.kind, self.tracer, self.log = kind, tracer, log
        self.calls: Any = None
        self.duration: Any = None
        self.counters: dict[str, Any] = {}
        if meter is not None:
            self.calls = meter.create_counter("berth.operations", unit="{operation}", description="berth operations")
            self.duration = meter.create_histogram(
                "berth.operation.duration",
                unit="s",
                description="how long a berth operation took",
                explicit_bucket_boundaries_advisory=_BUCKETS,
            )
            for name in _COUNTED.values():
                self.counters[name] = meter.create_counter(name, unit="{operation}")

    def wrap(self, name: str, fn: Callable[..., Any], outcome: Outcome, attrs: Mapping[str, str]) -> Callable[..., Any]:
        op = _Op(self, f"{self.kind}.{name}", outcome, attrs)
        if outcome is ITERATES:
            return op.iterating(fn)
        import inspect  # only once something records: a store that wraps nothing never imports it

        if inspect.iscoroutinefunction(fn):
            return op.awaiting(fn)
        return op.calling(fn)


class _Op:
    """One traced operation of one object: its span's name and attributes, and how its outcome is recorded."""

    def __init__(self, observer: _Observer, operation: str, outcome: Outcome, attrs: Mapping[str, str]):
        self.observer, self.outcome = observer, outcome
        self.span_name = f"berth.{operation}"
        self.attrs = dict(attrs)
        self.metric_attrs = {"berth.operation": operation, **attrs}

    def span(self) -> AbstractContextManager[Any]:
        tracer = self.observer.tracer
        if tracer is None:
            return nullcontext()
        return tracer.start_as_current_span(  # type: ignore[no-any-return]
            self.span_name, attributes=self.attrs, record_exception=False, set_status_on_exception=False
        )

    def done(self, span: Any, began: float, result: Any = None, exc: BaseException | None = None) -> None:
        """Record how the call ended: on `span` (None: no tracer), in the metrics, in the log."""
        met = exc
        if exc is None:
            word, met = self.outcome(result)
        else:
            word = outcome_of_error(exc)
        count = len(result) if isinstance(result, list) else result
        if not isinstance(count, int) or isinstance(count, bool):
            count = None
        elapsed = time.perf_counter() - began
        observer = self.observer
        if span is not None:
            span.set_attribute("berth.outcome", word)
            if count is not None:
                span.set_attribute("berth.count", count)
            if exc is not None:
                from opentelemetry.trace import StatusCode

                kind = _error_type(exc)
                span.set_attribute("error.type", kind)
                span.set_status(StatusCode.ERROR, kind)
        if observer.calls is not None:
            attrs = {**self.metric_attrs, "berth.outcome": word}
            observer.calls.add(1, attrs)
            observer.duration.record(elapsed, attrs)
            counted = _COUNTED.get(word if exc is not None else outcome_of_error(met) if met is not None else "")
            if counted is not None:
                observer.counters[counted].add(1, self.metric_attrs)
            if word == "swept" and count and self.span_name == "berth.store.sweep":
                observer.counters["berth.expiries"].add(count, self.metric_attrs)
        if observer.log is not None:
            observer.log.debug(
                "%s identity=%s backend=%s outcome=%s%s%s %.3f ms",
                self.span_name,
                self.attrs["berth.identity"],
                self.attrs["berth.backend"],
                word,
                "" if count is None else f" count={count}",
                "" if exc is None else f" error={_error_type(exc)}",
                elapsed * 1e3,
            )

    def calling(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Any:
            with _Call(self) as call:
                call.result = fn(*args, **kwargs)
                return call.result

        return _named(traced, fn)

    def awaiting(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def traced(*args: Any, **kwargs: Any) -> Any:
            with _Call(self) as call:
                call.result = await fn(*args, **kwargs)
                return call.result

        return _named(traced, fn)

    def iterating(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A call that returns an iterator: its span (not made current: the caller's code runs between
        the rows) lasts until the iteration ends, and counts the rows."""

        def traced(*args: Any, **kwargs: Any) -> Any:
            tally = _Tally(self)
            with tally.failing():
                rows = fn(*args, **kwargs)
            if hasattr(rows, "__anext__"):
                return self._arows(rows, tally)
            return self._rows(rows, tally)

        return _named(traced, fn)

    @staticmethod
    def _rows(rows: Iterator[Any], tally: _Tally) -> Iterator[Any]:
        with tally:
            for row in rows:
                tally.count += 1
                yield row

    @staticmethod
    async def _arows(rows: AsyncIterator[Any], tally: _Tally) -> AsyncIterator[Any]:
        with tally:
            async for row in rows:
                tally.count += 1
                yield row


class _Call:
    """One call of an operation: its span current while it runs, its outcome recorded as it ends."""

    __slots__ = ("began", "op", "result", "scope", "span")

    def __init__(self, op: _Op):
        self.op, self.result = op, None

    def __enter__(self) -> _Call:
        self.began = time.perf_counter()
        self.scope = self.op.span()
        self.span = self.scope.__enter__()
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            self.op.done(self.span, self.began, self.result, exc)
        finally:
            self.scope.__exit__(kind, exc, tb)


class _Tally:
    """An iteration of an operation's rows: its span ends, and its outcome is recorded, when the iteration
    ends (run out, closed early, or failed) or when the call that would return the iterator fails."""

    def __init__(self, op: _Op):
        self.op, self.count = op, 0
        self.began = time.perf_counter()
        tracer = op.observer.tracer
        self.span = None if tracer is None else tracer.start_span(op.span_name, attributes=op.attrs)

    @contextmanager
    def failing(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            self._end(exc)
            raise

    def __enter__(self) -> _Tally:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self._end(None if isinstance(exc, GeneratorExit) else exc)  # closed early: what was read is the outcome

    def _end(self, exc: BaseException | None) -> None:
        try:
            self.op.done(self.span, self.began, self.count, exc)
        finally:
            if self.span is not None:
                self.span.end()


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def _named(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    wrapper.__name__ = getattr(fn, "__name__", wrapper.__name__)
    wrapper.__qualname__ = getattr(fn, "__qualname__", wrapper.__qualname__)
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _observer(kind: str) -> _Observer | None:
    """What `kind`'s operations record to in this process now, or None when nothing would record them."""
    tracer = meter = None
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None and _configured(trace.get_tracer_provider(), "opentelemetry.trace"):
        tracer = trace.get_tracer("berth")
    metrics = sys.modules.get("opentelemetry.metrics")
    if metrics is not None and _configured(metrics.get_meter_provider(), "opentelemetry.metrics"):
        meter = metrics.get_meter("berth")
    log = logging.getLogger(f"berth.{kind}")
    debug = log if log.isEnabledFor(logging.DEBUG) else None
    if tracer is None and meter is None and debug is None:
        return None
    return _Observer(kind, tracer, meter, debug)


def instrument(obj: object, kind: str, *, identity: str, backend: object) -> None:
    """Trace, measure and log `obj`'s operations of `kind` (`OPERATIONS`), if anything would record them.

    Called once, at open; when nothing is configured it wraps nothing (no cost per call).
    """
    observer = _observer(kind)
    if observer is None:
        return
    attrs = {"berth.backend": scheme_of(backend), "berth.identity": identity}
    for name, outcome in OPERATIONS[kind].items():
        fn = getattr(obj, name, None)
        if fn is not None:
            setattr(obj, name, observer.wrap(name, fn, outcome, attrs))
