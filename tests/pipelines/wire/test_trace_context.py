"""The trace context a message carries is written as OpenTelemetry's W3C propagator writes it."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pipelines.wire import trace_context


def propagated(span_context: SpanContext) -> dict[str, str]:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(span_context)))
    return carrier


def test_the_carrier_is_what_the_w3c_propagator_writes() -> None:
    for span_context in (
        SpanContext(0x1, 0x2, is_remote=False, trace_flags=TraceFlags(0)),
        SpanContext(0xABCDEF << 64, 0xFFFF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
        SpanContext(
            2**128 - 1, 2**64 - 1, is_remote=False, trace_flags=TraceFlags(1), trace_state=TraceState([("v", "1")])
        ),
        INVALID_SPAN_CONTEXT,
    ):
        assert trace_context.carrier(span_context) == propagated(span_context), span_context
