"""The W3C trace context a message carries (``traceparent``, and ``tracestate`` when there is one).

Written straight from a span's context: OpenTelemetry's propagators go through the current context,
a composite of propagators and a regular-expression check for every message, which cost a start of
a run as much CPU as storing its plan.
"""

from __future__ import annotations

from opentelemetry.trace import SpanContext


def carrier(span_context: SpanContext) -> dict[str, str]:
    """The trace context of ``span_context`` as the W3C propagator writes it (empty if it is invalid)."""
    if not span_context.is_valid:
        return {}
    flags = int(span_context.trace_flags)
    written = {"traceparent": f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{flags:02x}"}
    if span_context.trace_state:
        written["tracestate"] = span_context.trace_state.to_header()
    return written
