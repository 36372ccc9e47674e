"""Spans, metrics and DEBUG lines of every store, question and coordinator call (berth._observe,
docs/observability.md), read back through the OpenTelemetry SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import opentelemetry.metrics._internal as metrics_internal
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

import berth
import berth.aio
from berth._observe import OPERATIONS, outcome_of_error, scheme_of
from berth.backends.memory import MemoryBackend
from berth.testing import SECRET, FakeClock, make_envelope

KEY = f"user-{SECRET}/pr-1"  # a key is never recorded: the marker in it must not show up either


class Recorded:
    """What the SDK recorded while a test ran."""

    def __init__(self, spans: InMemorySpanExporter, reader: InMemoryMetricReader):
        self.exporter, self.reader = spans, reader

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def names(self) -> list[str]:
        return [span.name for span in self.spans]

    def outcomes(self, name: str) -> list[Any]:
        return [span.attributes["berth.outcome"] for span in self.spans if span.name == name and span.attributes]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += [(dict(p.attributes or {}), p) for p in m.data.data_points]
        return found

    def total(self, metric: str, **attrs: str) -> int:
        return sum(
            p.value
            for labels, p in self.points(f"berth.{metric}")
            if all(labels.get(f"berth.{k}") == v for k, v in attrs.items())
        )

    def everything(self) -> str:
        """Every span (name, attributes, status, events) and every metric point, as text."""
        spans = [s.to_json() for s in self.spans]
        data = self.reader.get_metrics_data()
        return "\n".join(spans) + (data.to_json() if data else "")


def _reset_globals() -> None:
    # the API sets its providers once per process; opentelemetry's own test utilities reset them so
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    """An SDK configured (as a host configures one at start-up) before the test opens its stores."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    _reset_globals()
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    try:
        yield Recorded(exporter, reader)
    finally:
        _reset_globals()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def _sealed() -> berth.AesGcmSealer:
    return berth.AesGcmSealer(berth.Keyring.generate())


def test_every_store_operation_has_a_span_with_its_outcome(recorded: Recorded) -> None:
    clock = FakeClock()
    store = berth.open_store("memory://", identity="pr-bot", sealer=_sealed(), clock=clock)
    env = make_envelope()
    token = store.save(KEY, env)
    assert store.load(KEY) is not None and store.load("nothing") is None
    store.load_many([KEY, "nothing"])
    store.delete(KEY, token)
    store.save(KEY, env)
    assert store.claim(KEY) is not None and store.claim(KEY) is None
    store.save(KEY, env)
    assert len(list(store.list())) == 1
    assert len(list(store.load_prefix("user-"))) == 1
    store.reseal()
    store.setup()
    assert store.delete_prefix("user-") == 1
    store.save(KEY, make_envelope(deadline=clock.now + timedelta(minutes=1)))
    clock.advance(timedelta(hours=1))
    assert store.sweep() == 1

    assert recorded.names() == [
        *("berth.store.save", "berth.store.load", "berth.store.load", "berth.store.load_many"),
        *("berth.store.delete", "berth.store.save", "berth.store.claim", "berth.store.claim"),
        *("berth.store.save", "berth.store.list", "berth.store.load_prefix", "berth.store.reseal"),
        *("berth.store.setup", "berth.store.delete_prefix", "berth.store.save", "berth.store.sweep"),
    ]
    assert recorded.outcomes("berth.store.load") == ["found", "absent"]
    assert recorded.outcomes("berth.store.claim") == ["claimed", "not_claimed"]
    for span in recorded.spans:
        assert span.attributes is not None
        assert span.attributes["berth.backend"] == "memory" and span.attributes["berth.identity"] == "pr-bot"
        assert span.status.status_code is StatusCode.UNSET
    counts = {
        s.name: s.attributes["berth.count"] for s in recorded.spans if s.attributes and "berth.count" in s.attributes
    }
    assert counts == {
        "berth.store.load_many": 2,
        "berth.store.list": 1,
        "berth.store.load_prefix": 1,
        "berth.store.reseal": 0,
        "berth.store.delete_prefix": 1,
        "berth.store.sweep": 1,
    }
    assert recorded.total("operations", operation="store.save", outcome="saved") == 4
    assert recorded.total("operations", operation="store.claim", outcome="not_claimed") == 1
    assert recorded.total("expiries") == 1  # the envelope the sweep removed
    durations = [
        p for labels, p in recorded.points("berth.operation.duration") if labels["berth.operation"] == "store.save"
    ]
    assert durations and durations[0].count == 4 and durations[0].sum > 0


def test_errors_set_the_span_status_and_count_conflicts_expiries_and_integrity_failures(recorded: Recorded) -> None:
    clock = FakeClock()
    store = berth.open_store("memory://", identity="pr-bot", sealer=_sealed(), clock=clock)
    token = store.save(KEY, make_envelope(deadline=clock.now + timedelta(minutes=1)))
    store.save(KEY, make_envelope(deadline=clock.now + timedelta(minutes=1)))
    with pytest.raises(berth.TokenMismatch):
        store.save(KEY, make_envelope(), if_match=token)
    clock.advance(timedelta(hours=1))
    with pytest.raises(berth.Expired):
        store.load(KEY)
    other = berth.Store(store.backend, identity="pr-bot", sealer=_sealed())  # not the key it was sealed under
    other.save("sealed-elsewhere", make_envelope())
    with pytest.raises(berth.IntegrityError):
        store.load("sealed-elsewhere")
    with pytest.raises(berth.InvalidKey):
        store.load("/bad")
    with pytest.raises(berth.InvalidKey):
        store.list("/bad")  # refused before it returns an iterator
    rows = store.list()
    next(rows, None)
    del rows  # dropped unfinished (closed): what was read is the outcome

    assert recorded.outcomes("berth.store.list") == ["refused", "listed"]
    failed = [s for s in recorded.spans if s.status.status_code is StatusCode.ERROR]
    assert [(s.attributes or {}).get("berth.outcome") for s in failed] == [
        "conflict",
        "expired",
        "integrity_failure",
        "refused",
        "refused",
    ]
    assert [(s.attributes or {}).get("error.type") for s in failed] == [
        "berth.TokenMismatch",
        "berth.Expired",
        "berth.IntegrityError",
        "berth.InvalidKey",
        "berth.InvalidKey",
    ]
    assert [s.status.description for s in failed] == [(s.attributes or {})["error.type"] for s in failed]
    assert not any(s.events for s in failed)  # no exception event: its message names the key
    assert recorded.total("conflicts") == 1 and recorded.total("expiries") == 1
    assert recorded.total("integrity_failures", operation="store.load") == 1


def test_questions_and_the_coordinator_nest_their_store_calls(recorded: Recorded) -> None:
    store = berth.open_store("memory://", identity="pr-bot", sealer=_sealed())
    questions = berth.open_questions("memory://", identity="pr-bot", sealer=_sealed())
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend(KEY, make_envelope(), question=f"ship it? {SECRET}")
    asked = questions.pending(KEY)
    assert asked is not None
    questions.provide(KEY, asked.id, f"yes {SECRET}", by="alice")
    assert questions.answer(KEY) is not None and questions.record(KEY) is not None
    assert len(list(questions.list())) == 1 and len(list(questions.headers())) == 1
    assert coordinator.wake(KEY).decision is berth.WakeDecision.RESUME
    assert coordinator.wake(KEY).decision is berth.WakeDecision.FRESH
    questions.sweep()

    names = set(recorded.names())
    assert {f"berth.questions.{op}" for op in OPERATIONS["questions"]} <= names
    assert {"berth.coordinator.suspend", "berth.coordinator.wake"} <= names
    assert recorded.outcomes("berth.coordinator.wake") == ["resume", "fresh"]
    wake = next(s for s in recorded.spans if s.name == "berth.coordinator.wake")
    assert wake.context is not None
    inside = [s.name for s in recorded.spans if s.parent is not None and s.parent.span_id == wake.context.span_id]
    assert "berth.store.load" in inside  # the wake's load of the envelope, a child of its span
    frames = {(s.attributes or {}).get("berth.identity") for s in recorded.spans if s.name.startswith("berth.store.")}
    assert frames == {"pr-bot", "pr-bot:questions"}


def test_async_calls_are_traced_the_same_way(recorded: Recorded) -> None:
    async def scenario() -> None:
        async with berth.aio.open_store("memory://", identity="pr-bot", sealer=_sealed()) as store:
            await store.save(KEY, make_envelope())
            assert await store.claim(KEY) is not None
            assert [x async for x in store.list()] == []
            with pytest.raises(berth.TokenMismatch):
                await store.delete(KEY, berth.Token.ZERO)
            questions = berth.aio.open_questions("memory://", identity="pr-bot", sealer=_sealed())
            coordinator = berth.aio.AsyncCoordinator(store, questions)
            await coordinator.suspend(KEY, make_envelope())
            assert (await coordinator.wake(KEY)).decision is berth.WakeDecision.REARM

    asyncio.run(scenario())
    assert recorded.outcomes("berth.store.claim") == ["claimed"]
    assert recorded.outcomes("berth.store.list") == ["listed"]
    assert recorded.outcomes("berth.store.delete") == ["conflict"]
    assert recorded.outcomes("berth.coordinator.wake") == ["rearm"]
    suspend = next(s for s in recorded.spans if s.name == "berth.coordinator.suspend")
    assert suspend.context is not None
    children = {s.name for s in recorded.spans if s.parent is not None and s.parent.span_id == suspend.context.span_id}
    assert children == {"berth.store.save", "berth.questions.ask"}


def test_no_key_state_prompt_or_answer_reaches_a_span_a_metric_or_a_log(
    recorded: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="berth")
    store = berth.open_store("memory://", identity="pr-bot", sealer=None)  # readable frames: the worst case
    questions = berth.open_questions("memory://", identity="pr-bot", sealer=None)
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend(KEY, make_envelope(), question=f"ship {SECRET}?")
    asked = questions.pending(KEY)
    assert asked is not None
    questions.provide(KEY, asked.id, f"no: {SECRET}", by="alice")
    assert coordinator.wake(KEY).decision is berth.WakeDecision.RESUME
    with pytest.raises(berth.TokenMismatch):
        store.delete(KEY, berth.Token.ZERO)

    exported = recorded.everything()
    assert "berth.coordinator.wake" in exported and "berth.operations" in exported
    assert SECRET not in exported
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("berth.")]
    assert any("berth.coordinator.wake identity=pr-bot backend=memory outcome=resume" in line for line in lines)
    assert any("outcome=conflict error=berth.TokenMismatch" in line for line in lines)
    assert not [line for line in lines if SECRET in line]


def test_debug_logging_alone_logs_one_line_per_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="berth.store")
    store = berth.open_store("memory://", identity="pr-bot", sealer=_sealed())
    store.save("k", make_envelope())
    store.claim("k")
    lines = [r.getMessage() for r in caplog.records if r.name == "berth.store"]
    assert [line.rsplit(" ", 2)[0] for line in lines] == [
        "berth.store.save identity=pr-bot backend=memory outcome=saved",
        "berth.store.claim identity=pr-bot backend=memory outcome=claimed",
    ]


def test_nothing_is_wrapped_without_an_sdk_or_debug_logging() -> None:
    # opentelemetry is imported here (this module imports it) but only the API's proxies are in place
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    store = berth.open_store("memory://", identity="pr-bot", sealer=_sealed())
    assert "save" not in vars(store) and store.save.__func__ is berth.Store.save  # type: ignore[attr-defined]
    coordinator = berth.Coordinator(store, berth.open_questions("memory://", identity="pr-bot", sealer=_sealed()))
    assert "wake" not in vars(coordinator)


def test_without_opentelemetry_installed_berth_works_and_imports_nothing_of_it() -> None:
    script = textwrap.dedent(
        """
        import json, logging, sys
        class Absent:  # as if opentelemetry-api were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {name!r}")
        sys.meta_path.insert(0, Absent())
        logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)
        import berth
        from berth.testing import make_envelope
        store = berth.open_store("memory://", identity="pr-bot", sealer=berth.AesGcmSealer(berth.Keyring.generate()))
        store.save("k", make_envelope())
        claimed = store.claim("k") is not None
        otel = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(json.dumps({"claimed": claimed, "otel": otel, "wrapped": "save" in vars(store)}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert json.loads(lines[-1]) == {"claimed": True, "otel": [], "wrapped": True}  # DEBUG logging still wraps
    assert "berth.store.claim identity=pr-bot backend=memory outcome=claimed" in done.stdout


NOT_OPERATIONS = {
    "store": {"aclose", "check_key", "close", "now", "core", "sync", "steps"},
    "questions": {"aclose", "close", "now", "sync", "core", "notify"},
    "coordinator": {"core"},
}
SHELLS = {
    "store": (berth.Store, berth.aio.AsyncStore),
    "questions": (berth.QuestionStore, berth.aio.AsyncQuestionStore),
    "coordinator": (berth.Coordinator, berth.aio.AsyncCoordinator),
}


@pytest.mark.parametrize("kind", sorted(SHELLS))
def test_every_public_call_is_an_operation_in_the_table(kind: str) -> None:
    for cls in SHELLS[kind]:
        calls = {
            name
            for name, value in inspect.getmembers(cls)
            if not name.startswith("_") and callable(value) and not isinstance(value, type)
        }
        assert calls - NOT_OPERATIONS[kind] <= set(OPERATIONS[kind]), f"{cls.__name__}: add it to berth._observe"


def test_outcome_words_and_schemes() -> None:
    assert outcome_of_error(berth.AnswerRefused("x")) == "conflict"
    assert outcome_of_error(berth.BackendError("x")) == "backend_error"
    assert outcome_of_error(berth.FormatError("x")) == "format_error"
    assert outcome_of_error(berth.ConfigDrift("x")) == "config_drift"
    assert outcome_of_error(asyncio.CancelledError()) == "cancelled"
    assert outcome_of_error(KeyError("x")) == "error"
    assert scheme_of(MemoryBackend()) == "memory"
    assert scheme_of(object()) == "object"
