"""One trace per run: a PRODUCER span per publish, a CONSUMER span per processing, linked by W3C context.

The trace context travels in ``message.options`` (never in pika or Dramatiq internals). A publish made
while a message is processed is a child of that message's span, so each step is a child of the step
that caused it, a fan-out's branches are siblings under its one publish, and retries stay in the run's
trace; a publish made outside any span (a replay) continues the trace the message already carried. A
chord callback's span links to the span of every member. Names and attributes follow the OpenTelemetry
messaging conventions (``publish <exchange>:<routing key>``, ``process <queue>``).
"""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware
from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from pipelines import naming
from pipelines import options as opt
from pipelines.routing import route_of

#: Publishes whose span was started but not ended (their publish raised) kept at most, per thread.
MAX_OPEN_PUBLISHES = 10_000


def _attributes(message: dramatiq.Message[Any] | dramatiq.broker.MessageProxy, destination: str) -> dict[str, Any]:
    step = message.options.get(opt.STEP) or {}
    attributes: dict[str, Any] = {
        "messaging.system": "rabbitmq",
        "messaging.destination.name": destination,
        "messaging.message.id": message.message_id,
        "messaging.message.conversation_id": message.options.get(opt.CORRELATION, ""),
        "pipeline.name": message.options.get(opt.PIPELINE, ""),
        "pipeline.run_id": step.get("run", ""),
        "pipeline.step": step.get("node", ""),
        "pipeline.actor": message.actor_name,
    }
    return {key: value for key, value in attributes.items() if value != ""}


class Tracing(Middleware):
    """Starts and ends the spans of publishing and processing (see the module docstring)."""

    def __init__(self, *, tracer: trace.Tracer, namespace: str) -> None:
        self.tracer = tracer
        self.namespace = namespace
        self._local = threading.local()

    def _publishing(self) -> dict[int, trace.Span]:
        spans: dict[int, trace.Span] | None = getattr(self._local, "publishing", None)
        if spans is None:
            spans = self._local.publishing = {}
        return spans

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        route = route_of(message)
        exchange = naming.delay_exchange(self.namespace) if delay else f"{self.namespace}.{route.exchange}"
        destination = f"{exchange}:{route.routing_key}"
        current = trace.get_current_span().get_span_context()
        parent = None if current.is_valid else propagate.extract(message.options.get(opt.TRACE) or {})
        attributes = _attributes(message, destination)
        attributes |= {
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
            "messaging.rabbitmq.destination.routing_key": route.routing_key,
        }
        span = self.tracer.start_span(
            f"publish {destination}", context=parent, kind=SpanKind.PRODUCER, attributes=attributes
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
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
        parent = propagate.extract(message.options.get(opt.TRACE) or {})
        links = [
            Link(trace.get_current_span(propagate.extract({"traceparent": parent_id})).get_span_context())
            for parent_id in message.options.get(opt.TRACE_LINKS, ())
        ]
        queue = naming.actor_queue(self.namespace, message.queue_name, message.actor_name)
        attributes = _attributes(message, queue)
        attributes |= {
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.rabbitmq.destination.routing_key": message.actor_name,
            "pipeline.attempt": int(message.options.get(opt.RETRIES, 0)) + 1,
        }
        span = self.tracer.start_span(
            f"process {queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes, links=links
        )
        self._local.processing = (span, context.attach(trace.set_span_in_context(span)))

    def _end(self, exception: BaseException | None, *, skipped: bool = False) -> None:
        opened: tuple[trace.Span, object] | None = getattr(self._local, "processing", None)
        if opened is None:
            return
        self._local.processing = None
        span, token = opened
        if exception is not None:
            span.record_exception(exception)
            span.set_attribute("error.type", type(exception).__name__)
            span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {exception}"))
        if skipped:
            span.set_attribute("pipeline.skipped", True)
        span.end()
        context.detach(token)  # type: ignore[arg-type]

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._end(exception)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._end(None, skipped=True)
