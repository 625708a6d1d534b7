"""One trace per run: a PRODUCER span per publish, a CONSUMER span per processing, linked by W3C context.

The trace context travels in ``message.options`` (never in pika or Dramatiq internals). A publish made
while a message is processed is a child of that message's span, so each step is a child of the step
that caused it, a fan-out's branches are siblings under its one publish, and retries stay in the run's
trace; a publish made outside any span (a replay) continues the trace the message already carried. A
chord callback's span links to the span of every member. Names and attributes follow the OpenTelemetry
messaging conventions (``publish <exchange>:<routing key>``, ``process <queue>``).

Spans cost CPU on the worker (creating them, and encoding them for export on the batch thread): the
attributes per actor that never change are built once, and ``[telemetry] sample_ratio`` trades detail
for throughput. A message of a run left out by sampling gets no span while it is processed, only its
start time; a span is made when it ends, back-dated, if it failed or was slow and such spans are kept
(``pipelines.observability.tail_sampling``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware
from opentelemetry import context, trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pipelines import options as opt
from pipelines.observability.tail_sampling import TailKeeping
from pipelines.wire import naming, trace_context
from pipelines.wire.routing import route_of
from pipelines.wire.steps import StepAddress

#: Publishes whose span was started but not ended (their publish raised) kept at most, per thread.
MAX_OPEN_PUBLISHES = 10_000
#: Only W3C trace context travels with messages (no baggage): it is all a trace needs.
_PROPAGATOR = TraceContextTextMapPropagator()
#: ``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``.
_TRACEPARENT_LENGTH = 55
_HEX = frozenset("0123456789abcdef")
#: Trace flags of a run left out by sampling: none, or the W3C "random trace id" flag alone.
_LEFT_OUT_FLAGS = {"00": 0, "02": 2}
#: Each thread's last ``traceparent`` read by :func:`_left_out_parent`, and what it read.
_last_left_out = threading.local()


def _message_attributes(message: dramatiq.Message[Any] | dramatiq.broker.MessageProxy) -> dict[str, Any]:
    options = message.options
    attributes: dict[str, Any] = {"messaging.message.id": message.message_id}
    correlation = options.get(opt.CORRELATION)
    if correlation:
        attributes["messaging.message.conversation_id"] = correlation
    step = StepAddress.best_effort(message)
    if step is not None:
        attributes["pipeline.run_id"] = step.run_id
        attributes["pipeline.step"] = step.node
        attributes["pipeline.name"] = options.get(opt.PIPELINE, "")
    return attributes


@lru_cache(maxsize=4096)
def _publish_attributes(destination: str, routing_key: str) -> dict[str, Any]:
    return {
        "messaging.system": "rabbitmq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": destination,
        "messaging.rabbitmq.destination.routing_key": routing_key,
    }


@lru_cache(maxsize=4096)
def _process_attributes(queue: str, actor: str) -> dict[str, Any]:
    return {
        "messaging.system": "rabbitmq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue,
        "messaging.rabbitmq.destination.routing_key": actor,
        "pipeline.actor": actor,
    }


def _left_out_parent(carrier: dict[str, str]) -> context.Context | None:
    """The trace context of a message whose run sampling left out, read without the propagator's regular
    expressions (most messages of a busy queue are such); None for any other carrier, which the
    propagator reads in full. Only the plain form: version 00, no trace state, flags without the sampled
    bit (00, or 02 where the trace id is marked random, as the SDK marks the ids it makes)."""
    header = carrier.get("traceparent")
    if not isinstance(header, str) or len(header) != _TRACEPARENT_LENGTH or len(carrier) != 1:
        return None
    # Every step of a run left out carries the same context: a thread running a chain's steps one after
    # another (local steps) reads it once.
    last = _last_left_out.__dict__
    if last.get("header") == header:
        parent: context.Context | None = last["parent"]
        return parent
    parent = _read_left_out(header)
    last["header"], last["parent"] = header, parent
    return parent


def _read_left_out(header: str) -> context.Context | None:
    version, trace_id, span_id, flags = header[:2], header[3:35], header[36:52], header[53:]
    if (version, header[2], header[35], header[52]) != ("00", "-", "-", "-") or flags not in _LEFT_OUT_FLAGS:
        return None
    if not _HEX.issuperset(trace_id) or not _HEX.issuperset(span_id):
        return None
    trace_flags = TraceFlags(_LEFT_OUT_FLAGS[flags])
    caused_by = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=trace_flags)
    return trace.set_span_in_context(NonRecordingSpan(caused_by)) if caused_by.is_valid else None


@dataclass(frozen=True)
class _LeftOut:
    """A message of a run that sampling left out, being processed: what its span needs if it is kept."""

    parent: context.Context
    started_ns: int
    token: object


class Tracing(Middleware):
    """Starts and ends the spans of publishing and processing (see the module docstring)."""

    #: Observability: its failures are logged and never stop a message (see ``pipelines.handling.guards``).
    fails_open = True

    def __init__(self, *, tracer: trace.Tracer, namespace: str, keeping: TailKeeping | None = None) -> None:
        self.tracer = tracer
        self.namespace = namespace
        self.keeping = keeping or TailKeeping(keep_failed=False, slower_than_s=0)
        self._local = threading.local()

    def _publishing(self) -> dict[int, trace.Span]:
        spans: dict[int, trace.Span] | None = getattr(self._local, "publishing", None)
        if spans is None:
            spans = self._local.publishing = {}
        return spans

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        current = trace.get_current_span().get_span_context()
        carried = message.options.get(opt.TRACE) or {}
        # A publish of a run that sampling left out would get a span that is dropped (the sampler is
        # parent-based, and keeps no publish span of such a run): the message carries the context it
        # is published in instead, and the run's later steps are left out as well.
        if current.is_valid and not current.trace_flags.sampled:
            message.options[opt.TRACE] = trace_context.carrier(current)
            return
        if not current.is_valid and _left_out_parent(carried) is not None:
            return
        route = route_of(message)
        exchange = naming.delay_exchange(self.namespace) if delay else f"{self.namespace}.{route.exchange}"
        destination = f"{exchange}:{route.routing_key}"
        parent = None if current.is_valid else _PROPAGATOR.extract(carried)
        span = self.tracer.start_span(f"publish {destination}", context=parent, kind=SpanKind.PRODUCER)
        if span.is_recording():  # most publishes of a sampled-down app are not: no attributes to build
            span.set_attributes(_publish_attributes(destination, route.routing_key))
            span.set_attributes(_message_attributes(message))
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        message.options[opt.TRACE] = carrier
        spans = self._publishing()
        if len(spans) >= MAX_OPEN_PUBLISHES:
            for stale in spans.values():
                stale.end()
            spans.clear()
        spans[id(message)] = span

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        span = self._publishing().pop(id(message), None)
        if span is not None:
            span.end()

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        carrier = message.options.get(opt.TRACE) or {}
        parent = _left_out_parent(carrier) or _PROPAGATOR.extract(carrier)
        caused_by = trace.get_current_span(parent).get_span_context()
        if caused_by.is_valid and not caused_by.trace_flags.sampled:
            # What it publishes stays in the run's trace, left out too (the parent's context is current).
            self._local.processing = _LeftOut(parent, time.time_ns(), context.attach(parent))
            return
        span = self._start_processing(message, parent, start_time=None)
        self._local.processing = (span, context.attach(trace.set_span_in_context(span)))

    def _start_processing(
        self, message: dramatiq.broker.MessageProxy, parent: context.Context, *, start_time: int | None
    ) -> trace.Span:
        options = message.options
        links = [
            Link(trace.get_current_span(_PROPAGATOR.extract({"traceparent": parent_id})).get_span_context())
            for parent_id in options.get(opt.TRACE_LINKS, ())
        ]
        queue = naming.actor_queue(self.namespace, message.queue_name, message.actor_name)
        attributes = {**_process_attributes(queue, message.actor_name), **_message_attributes(message)}
        retries = options.get(opt.RETRIES)
        if retries:
            attributes["pipeline.attempt"] = int(retries) + 1
        return self.tracer.start_span(
            f"process {queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=start_time,
        )

    def _end(
        self, message: dramatiq.broker.MessageProxy, exception: BaseException | None, *, skipped: bool = False
    ) -> None:
        opened: tuple[trace.Span, object] | _LeftOut | None = getattr(self._local, "processing", None)
        if opened is None:
            return
        self._local.processing = None
        if isinstance(opened, _LeftOut):
            context.detach(opened.token)  # type: ignore[arg-type]
            took_ns = time.time_ns() - opened.started_ns
            if self.keeping.reason(failed=exception is not None, took_ns=took_ns) is None:
                return
            span = self._start_processing(message, opened.parent, start_time=opened.started_ns)
            token = None
        else:
            span, token = opened
        if exception is not None:
            span.record_exception(exception)
            span.set_attribute("error.type", type(exception).__name__)
            span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {exception}"))
        if skipped:
            span.set_attribute("pipeline.skipped", True)
        span.end()
        if token is not None:
            context.detach(token)  # type: ignore[arg-type]

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._end(message, exception)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._end(message, None, skipped=True)
