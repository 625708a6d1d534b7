"""Runs the ratio leaves out still export their failed and slow steps, in the run's trace, and nothing else."""

from __future__ import annotations

import time
from typing import Any

import dramatiq
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, ParentBased
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from pipelines import chain
from pipelines import options as opt
from pipelines.middleware.tracing import Tracing, _left_out_parent
from pipelines.observability.tail_sampling import (
    KEPT_ATTRIBUTE,
    KeepFailedAndSlow,
    RecordLeftOutProcessing,
    TailKeeping,
    sampler_for,
)
from tests.middleware.test_tracing import TIMEOUT_S, AwaitedExporter, Traced
from tests.support.fixtures import MakeApp, StartWorker

NONE_SAMPLED = {"enabled": True, "sample_ratio": 0.0}


def traced(make_app: MakeApp, worker: dict[str, Any] | None = None, **telemetry: Any) -> Traced:
    exporter = AwaitedExporter()
    app = make_app(telemetry={**NONE_SAMPLED, **telemetry}, worker=worker or {}, span_exporter=exporter)
    return Traced(app, exporter)


def working(
    make_app: MakeApp, start_worker: StartWorker, worker: dict[str, Any] | None = None, **telemetry: Any
) -> tuple[Traced, dict[str, Any]]:
    """A traced app with this module's actors, and a worker running them."""
    t = traced(make_app, worker, **telemetry)
    actors = declare(t.app)
    start_worker(t.app)
    return t, actors


def declare(app: Any) -> dict[str, Any]:
    @dramatiq.actor(broker=app.broker)
    def add(x: int) -> int:
        return x + 1

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def refuse(x: int) -> int:
        raise ValueError(f"{x} is refused")

    @dramatiq.actor(broker=app.broker)
    def linger(x: int) -> int:
        time.sleep(0.3)
        return x

    return {"add": add, "refuse": refuse, "linger": linger}


def test_a_failed_step_of_a_run_left_out_is_exported_alone_in_the_runs_trace(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    t, a = working(make_app, start_worker)

    run = t.app.start(chain(a["add"], a["refuse"], a["add"]), args=(1,))
    assert run.wait(TIMEOUT_S).state == "failed"

    [failed] = t.consumers("refuse")
    spans = t.spans()
    assert spans == [failed]  # neither the publishes nor the step that succeeded
    assert failed.attributes is not None
    assert failed.attributes[KEPT_ATTRIBUTE] == "failed"
    assert failed.attributes["pipeline.run_id"] == run.id
    assert failed.status.status_code == StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]
    assert format(failed.context.trace_id, "032x") == run.status().trace_id


def test_a_slow_step_is_kept_and_a_quick_one_is_not(make_app: MakeApp, start_worker: StartWorker) -> None:
    t, a = working(make_app, start_worker, keep_slower_than_s=0.2)

    run = t.app.start(chain(a["add"], a["linger"]), args=(1,))
    assert run.result(timeout_s=TIMEOUT_S) == 2

    [slow] = t.consumers("linger")
    assert slow.attributes is not None
    assert slow.attributes[KEPT_ATTRIBUTE] == "slow"
    assert (slow.end_time or 0) - (slow.start_time or 0) >= 0.3e9  # made when it ended, dated from its start
    assert t.spans() == [slow]


class Collected(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def ended_span(*, sampled: bool, failed: bool, took_s: float) -> ReadableSpan:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return ReadableSpan(
        name="process q",
        context=SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=flags),
        attributes={"pipeline.run_id": "r"},
        status=Status(StatusCode.ERROR if failed else StatusCode.UNSET),
        start_time=1_000_000_000,
        end_time=1_000_000_000 + int(took_s * 1e9),
    )


def test_keeping_off_passes_on_the_sampled_spans_only() -> None:
    collected = Collected()
    keeper = KeepFailedAndSlow(collected, TailKeeping(keep_failed=False, slower_than_s=0))
    sampled = ended_span(sampled=True, failed=False, took_s=0.1)

    for span in (sampled, ended_span(sampled=False, failed=True, took_s=60)):
        keeper.on_end(span)

    assert collected.spans == [sampled]
    assert isinstance(sampler_for(0.0, keeps_tail=False), ParentBased)  # nothing left out is even recorded
    # A worker tracing every run still keeps the failures of runs that a producer's sampling left out.
    assert isinstance(sampler_for(1.0, keeps_tail=True), RecordLeftOutProcessing)


def test_a_kept_span_is_passed_on_as_sampled_with_why() -> None:
    collected = Collected()
    keeper = KeepFailedAndSlow(collected, TailKeeping(keep_failed=True, slower_than_s=5))

    for span in (
        ended_span(sampled=False, failed=True, took_s=0.1),
        ended_span(sampled=False, failed=False, took_s=6),
        ended_span(sampled=False, failed=False, took_s=4),
    ):
        keeper.on_end(span)

    assert [dict(s.attributes or {}) for s in collected.spans] == [
        {"pipeline.run_id": "r", KEPT_ATTRIBUTE: "failed"},
        {"pipeline.run_id": "r", KEPT_ATTRIBUTE: "slow"},
    ]
    assert all(s.context is not None and s.context.trace_flags.sampled for s in collected.spans)


def test_sampled_runs_are_exported_whole_with_keeping_on(make_app: MakeApp, start_worker: StartWorker) -> None:
    t, a = working(make_app, start_worker, sample_ratio=1.0)

    run = t.app.start(chain(a["add"], a["add"]), args=(1,))
    assert run.result(timeout_s=TIMEOUT_S) == 3

    spans = t.await_spans(lambda spans: sum(s.kind == SpanKind.CONSUMER for s in spans) == 2, "both steps")
    assert {s.kind for s in spans} >= {SpanKind.PRODUCER, SpanKind.CONSUMER}
    assert not any(KEPT_ATTRIBUTE in (s.attributes or {}) for s in spans)


def test_only_processing_spans_of_runs_left_out_are_recorded() -> None:
    sampler = RecordLeftOutProcessing(0.0)
    trace_id = 0x1234

    consumer = sampler.should_sample(None, trace_id, "process q", SpanKind.CONSUMER, {"a": 1})
    producer = sampler.should_sample(None, trace_id, "publish q", SpanKind.PRODUCER, {"a": 1})

    assert (consumer.decision, dict(consumer.attributes or {})) == (Decision.RECORD_ONLY, {"a": 1})
    assert producer.decision is Decision.DROP
    assert RecordLeftOutProcessing(1.0).should_sample(None, trace_id, "x", SpanKind.CONSUMER).decision is (
        Decision.RECORD_AND_SAMPLE
    )


def test_only_the_plain_traceparent_of_a_run_left_out_is_read_without_the_propagator() -> None:
    trace_id, span_id = "ab" * 16, "cd" * 8
    left_out = _left_out_parent({"traceparent": f"00-{trace_id}-{span_id}-00"})

    assert left_out is not None
    caused_by = trace.get_current_span(left_out).get_span_context()
    assert (caused_by.trace_id, caused_by.span_id, caused_by.is_remote) == (int(trace_id, 16), int(span_id, 16), True)
    assert not caused_by.trace_flags.sampled
    random_id = _left_out_parent({"traceparent": f"00-{trace_id}-{span_id}-02"})  # as the SDK marks its ids
    assert random_id is not None
    assert trace.get_current_span(random_id).get_span_context().trace_flags == TraceFlags(2)
    for other in (
        {"traceparent": f"00-{trace_id}-{span_id}-01"},  # sampled
        {"traceparent": f"00-{trace_id}-{span_id}-03"},  # sampled, random trace id
        {"traceparent": f"00-{trace_id}-{span_id}-00", "tracestate": "vendor=1"},  # state to carry on
        {"traceparent": f"00-{'0' * 32}-{span_id}-00"},  # invalid trace id
        {"traceparent": f"00-{trace_id.upper()}-{span_id}-00"},  # not lower-case hex
        {"traceparent": f"00-{trace_id[:-1]}_-{span_id}-00"},
        {},
    ):
        assert _left_out_parent(other) is None, other


def test_a_thread_reads_a_run_left_outs_context_once_and_each_other_context_anew() -> None:
    trace_id = "ab" * 16
    first = _left_out_parent({"traceparent": f"00-{trace_id}-{'cd' * 8}-00"})
    again = _left_out_parent({"traceparent": f"00-{trace_id}-{'cd' * 8}-00"})  # the run's next step, here
    other = _left_out_parent({"traceparent": f"00-{trace_id}-{'ef' * 8}-00"})

    assert first is not None
    assert other is not None
    assert again is first
    assert trace.get_current_span(other).get_span_context().span_id == int("ef" * 8, 16)
    assert _left_out_parent({"traceparent": f"00-{trace_id}-{'ef' * 8}-01"}) is None  # sampled: the propagator's


class _Published(dramatiq.Middleware):
    """Records the trace context of every message as it is published."""

    def __init__(self) -> None:
        self.carriers: dict[str, dict[str, str]] = {}

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        self.carriers[message.actor_name] = dict(message.options.get(opt.TRACE) or {})


def test_the_steps_of_a_run_left_out_carry_its_trace_context_and_start_no_publish_span(
    make_app: MakeApp, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, a = working(make_app, start_worker, {"local_steps": False})  # every step published
    published = _Published()
    t.app.broker.add_middleware(published)
    [tracing] = [m for m in t.app.broker.middleware if isinstance(m, Tracing)]
    started: list[str] = []
    real_start = tracing.tracer.start_span

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        started.append(name)
        return real_start(name, *args, **kwargs)

    monkeypatch.setattr(tracing.tracer, "start_span", counted)

    run = t.app.start(chain(a["add"], a["linger"]), args=(1,))
    assert run.result(timeout_s=TIMEOUT_S) == 2

    trace_id = run.status().trace_id
    assert {actor: carrier["traceparent"][3:35] for actor, carrier in published.carriers.items()} == {
        "add": trace_id,
        "linger": trace_id,
    }
    assert all(carrier["traceparent"][53:] in ("00", "02") for carrier in published.carriers.values())
    assert not [name for name in started if name.startswith("publish")]
    assert t.spans() == []
