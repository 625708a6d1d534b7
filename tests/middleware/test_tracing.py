"""One trace per run: the span tree of chains, fan-outs, chords, retries and replays (in-memory exporter)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import dramatiq
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pipelines import chain, chord, fan_out, for_each
from pipelines.app import App
from pipelines.middleware import Tracing
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


class AwaitedExporter(InMemorySpanExporter):
    """Keeps spans in memory and wakes whoever waits for one: spans end in worker threads, in any order
    (a branch's consumer span can end before the publish span that is its parent)."""

    def __init__(self) -> None:
        super().__init__()
        self.exported = threading.Condition()
        self.batches = 0

    def exported_since(self, batches: int) -> bool:
        """Whether a batch was exported since ``batches`` were (call it holding ``exported``)."""
        return self.batches != batches

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        with self.exported:
            self.batches += 1
            self.exported.notify_all()
        return result


class Traced:
    """An app whose spans land in memory, and helpers that await the spans they read (with a deadline)."""

    def __init__(self, app: App, exporter: AwaitedExporter) -> None:
        self.app = app
        self.exporter = exporter

    def spans(self) -> list[ReadableSpan]:
        assert self.app.tracer_provider is not None
        self.app.tracer_provider.force_flush()
        return list(self.exporter.get_finished_spans())

    def await_spans(self, done: Callable[[list[ReadableSpan]], bool], what: str) -> list[ReadableSpan]:
        """The finished spans once ``done`` holds for them (AssertionError after TIMEOUT_S)."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            with self.exporter.exported:
                seen = self.exporter.batches
            # Read outside the lock: force_flush may export from the span processor's own thread.
            spans = self.spans()
            if done(spans):
                return spans
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {what} within {TIMEOUT_S} s"
            with self.exporter.exported:
                self.exporter.exported.wait_for(partial(self.exporter.exported_since, seen), remaining)

    def consumers(self, actor: str, count: int = 1) -> list[ReadableSpan]:
        """The consumer spans of ``actor``, once there are at least ``count``."""

        def of_actor(spans: list[ReadableSpan]) -> list[ReadableSpan]:
            return [
                s for s in spans if s.kind == SpanKind.CONSUMER and (s.attributes or {}).get("pipeline.actor") == actor
            ]

        return of_actor(self.await_spans(lambda spans: len(of_actor(spans)) >= count, f"{count} spans of {actor}"))

    def by_id(self) -> dict[int, ReadableSpan]:
        return {s.context.span_id: s for s in self.spans()}

    def parent(self, span: ReadableSpan) -> ReadableSpan:
        """``span``'s parent, once it has ended and been exported."""
        assert span.parent is not None, f"{span.name} has no parent"
        parent_id = span.parent.span_id
        spans = self.await_spans(lambda spans: any(s.context.span_id == parent_id for s in spans), "parent span")
        return next(s for s in spans if s.context.span_id == parent_id)

    def ancestors(self, span: ReadableSpan) -> list[int]:
        spans, chain = self.by_id(), []
        while span.parent is not None and span.parent.span_id in spans:
            span = spans[span.parent.span_id]
            chain.append(span.context.span_id)
        return chain


@pytest.fixture
def traced(make_app: MakeApp) -> Traced:
    exporter = AwaitedExporter()
    return Traced(make_app(telemetry={"enabled": True, "sample_ratio": 1.0}, span_exporter=exporter), exporter)


def declare(app: App) -> dict[str, Any]:
    attempts: dict[str, int] = {}

    @dramatiq.actor(broker=app.broker)
    def add(x: int, y: int = 1) -> int:
        return x + y

    @dramatiq.actor(broker=app.broker)
    def double(x: int) -> int:
        return x * 2

    @dramatiq.actor(broker=app.broker, queue_name="other")
    def negate(x: int) -> int:
        return -x

    @dramatiq.actor(broker=app.broker)
    def total(values: list[int]) -> int:
        return sum(values)

    @dramatiq.actor(broker=app.broker, max_retries=1, min_backoff=1, max_backoff=5)
    def flaky(x: int) -> int:
        attempts["flaky"] = attempts.get("flaky", 0) + 1
        if attempts["flaky"] == 1:
            raise ConnectionError("first attempt fails")
        return x

    return {"add": add, "double": double, "negate": negate, "total": total, "flaky": flaky}


def test_a_chain_is_one_trace_under_the_callers_span_with_each_step_a_child_of_the_previous(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    exporter = AwaitedExporter()
    # Every step published (not run where the step before it finished): a publish span between two steps.
    settings = {"telemetry": {"enabled": True, "sample_ratio": 1.0}, "worker": {"local_steps": False}}
    traced = Traced(make_app(**settings, span_exporter=exporter), exporter)
    a = declare(traced.app)
    start_worker(traced.app)
    # The app's own provider: the process's global one is whichever app of the test session came first.
    assert traced.app.tracer_provider is not None
    tracer = traced.app.tracer_provider.get_tracer("web")
    with tracer.start_as_current_span("POST /orders") as request:
        run = traced.app.start(chain(a["add"], a["double"], a["negate"]), args=(1,))
    assert run.result(timeout_s=TIMEOUT_S) == -4

    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in traced.spans()} == {trace_id}
    assert run.status().trace_id == format(trace_id, "032x")
    [add], [double], [negate] = (traced.consumers(name) for name in ("add", "double", "negate"))
    run_span = traced.parent(traced.parent(add))
    assert run_span.name == "run add>...>negate"
    assert run_span.parent is not None
    assert run_span.parent.span_id == request.get_span_context().span_id
    assert traced.parent(traced.parent(double)) is not None
    assert traced.parent(traced.parent(double)).context.span_id == add.context.span_id
    assert traced.parent(traced.parent(negate)).context.span_id == double.context.span_id

    publish = traced.parent(double)
    ns = traced.app.settings.namespace
    assert (publish.kind, publish.name) == (SpanKind.PRODUCER, f"publish {ns}.work:double")
    assert publish.attributes is not None
    assert {
        "messaging.system": "rabbitmq",
        "messaging.operation.type": "send",
        "messaging.destination.name": f"{ns}.work:double",
        "messaging.rabbitmq.destination.routing_key": "double",
        "pipeline.run_id": run.id,
        "pipeline.step": "0.1",
    }.items() <= dict(publish.attributes).items()
    assert double.attributes is not None
    assert double.attributes["messaging.operation.type"] == "process"
    assert double.attributes["messaging.message.conversation_id"] == run.status().correlation_id


def test_a_step_run_where_the_step_before_it_finished_is_that_steps_child_in_the_runs_one_trace(
    traced: Traced, start_worker: StartWorker
) -> None:
    a = declare(traced.app)
    start_worker(traced.app)

    run = traced.app.start(chain(a["add"], a["double"], a["negate"]), args=(1,))

    assert run.result(timeout_s=TIMEOUT_S) == -4
    [add], [double], [negate] = (traced.consumers(name) for name in ("add", "double", "negate"))
    assert {s.context.trace_id for s in traced.spans()} == {add.context.trace_id}
    assert traced.parent(double).context.span_id == add.context.span_id  # no publish between them
    assert traced.parent(negate).context.span_id == double.context.span_id
    assert not any(s.name.startswith("publish") and s.name.endswith((":double", ":negate")) for s in traced.spans())


def test_fan_out_branches_are_siblings_under_its_one_publish(traced: Traced, start_worker: StartWorker) -> None:
    a = declare(traced.app)
    start_worker(traced.app)

    run = traced.app.start(chain(a["add"], fan_out(a["double"], a["negate"])), args=(1,))
    assert run.result(timeout_s=TIMEOUT_S) == [4, -2]

    [double], [negate] = traced.consumers("double"), traced.consumers("negate")
    publish = traced.parent(double)
    assert publish.context.span_id == traced.parent(negate).context.span_id
    assert publish.kind == SpanKind.PRODUCER
    assert publish.name.endswith(":double.negate")


def test_a_chord_callback_links_to_every_member(traced: Traced, start_worker: StartWorker) -> None:
    a = declare(traced.app)
    start_worker(traced.app)

    run = traced.app.start(chord(for_each(a["double"], range(4)), then=a["total"]))
    assert run.result(timeout_s=TIMEOUT_S) == 12

    members = {s.context.span_id for s in traced.consumers("double", 4)}
    [callback] = traced.consumers("total")
    assert {link.context.span_id for link in callback.links} == members
    assert len({s.context.trace_id for s in traced.spans()}) == 1


def test_a_retry_stays_in_the_runs_trace_and_the_failure_is_recorded(traced: Traced, start_worker: StartWorker) -> None:
    a = declare(traced.app)
    start_worker(traced.app)

    run = traced.app.start(chain(a["flaky"], a["double"]), args=(3,))
    assert run.result(timeout_s=TIMEOUT_S) == 6

    first, second = sorted(traced.consumers("flaky", 2), key=lambda s: s.start_time or 0)
    assert first.status.status_code == StatusCode.ERROR
    assert [event.name for event in first.events] == ["exception"]
    # The retry is published while the failed attempt is processed (the embedded broker re-publishes it
    # once more when its delay ends, hence "an ancestor").
    assert first.context.span_id in traced.ancestors(second)
    assert second.attributes is not None
    assert second.attributes["pipeline.attempt"] == 2
    assert len({s.context.trace_id for s in traced.spans()}) == 1


def test_a_replayed_dead_letter_continues_its_runs_trace(
    traced: Traced, start_worker: StartWorker, observe: Observe
) -> None:
    app = traced.app
    observer = observe(app)
    broken = {"now": True}

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def fragile(x: int) -> int:
        if broken["now"]:
            raise RuntimeError("down")
        return x

    start_worker(app)
    run = app.start(chain(fragile), args=(1,))
    assert run.wait(TIMEOUT_S).state == "failed"
    observer.wait_dead_lettered("fragile", 1)
    broken["now"] = False
    [letter] = app.dead_letters.list()
    app.dead_letters.replay(letter.id)

    assert run.result(timeout_s=TIMEOUT_S) == 1
    assert len({s.context.trace_id for s in traced.spans()}) == 1
    assert len(traced.consumers("fragile", 2)) == 2


def test_tracing_off_installs_nothing(make_app: MakeApp) -> None:
    app = make_app()

    assert not any(isinstance(m, Tracing) for m in app.broker.middleware)
    assert app.runtime.tracer is None
    assert app.tracer_provider is None
    assert isinstance(TracerProvider, type)
