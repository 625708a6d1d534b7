"""Sampling that keeps what a trace is for: a share of runs whole, and every failed or slow step.

Head sampling (``[telemetry] sample_ratio``) decides per run, when its first span starts, and the run's
steps follow that decision through the trace context, so a busy queue pays for a fraction of its runs.
Failures and slow steps are not known when a run starts, so a step the ratio left out keeps its start
time (``pipelines.middleware.tracing``) and gets a back-dated processing span when it ends, exported
if it failed (``keep_failed``) or took longer than ``keep_slower_than_s``. Such a span keeps the run's trace id and
its ``pipeline.*`` attributes, and ``pipeline.kept`` says why it was kept; the other spans of that run
are not exported, so its trace shows the failed or slow step alone. For whole traces of every failed
run, export everything (``sample_ratio = 1.0``) to an OpenTelemetry Collector with tail sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode, TraceFlags, TraceState
from opentelemetry.util.types import Attributes

#: Attribute of a span exported outside the sampled share: why it was kept ("failed" or "slow").
KEPT_ATTRIBUTE = "pipeline.kept"


class RecordLeftOutProcessing(Sampler):
    """The run's head-sampling decision, except that a processing span it leaves out is still recorded
    (not sampled), so that ``KeepFailedAndSlow`` can keep it once it is known to have failed or been slow.

    Publish spans of runs left out are dropped outright: they cost nothing and fail with the publish.
    """

    def __init__(self, ratio: float) -> None:
        self.head = ParentBased(TraceIdRatioBased(ratio))

    def should_sample(  # noqa: PLR0917 - the SDK's signature
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        result = self.head.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        if result.decision is Decision.DROP and kind is SpanKind.CONSUMER:
            return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        return f"RecordLeftOutProcessing{{{self.head.get_description()}}}"  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class TailKeeping:
    """Which spans of runs left out by sampling are kept: the failed ones, the slow ones (the one rule
    that the tracing middleware and ``KeepFailedAndSlow`` both apply)."""

    keep_failed: bool
    slower_than_s: float

    @property
    def keeps_any(self) -> bool:
        return self.keep_failed or self.slower_than_s > 0

    def reason(self, *, failed: bool, took_ns: int) -> str | None:
        """Why a span that ``failed`` (or not) and took ``took_ns`` is kept ("failed", "slow"), or None."""
        if failed and self.keep_failed:
            return "failed"
        if self.slower_than_s > 0 and took_ns >= self.slower_than_s * 1e9:
            return "slow"
        return None


class KeepFailedAndSlow(SpanProcessor):
    """Passes sampled spans to ``export``, and recorded-only ones too when ``keeping`` keeps them."""

    def __init__(self, export: SpanProcessor, keeping: TailKeeping) -> None:
        self.export = export
        self.keeping = keeping

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self.export.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or span.context.trace_flags.sampled:
            self.export.on_end(span)
            return
        reason = self.reason_to_keep(span)
        if reason is not None:
            self.export.on_end(_exported_copy(span, reason))

    def reason_to_keep(self, span: ReadableSpan) -> str | None:
        failed = span.status.status_code is StatusCode.ERROR
        return self.keeping.reason(failed=failed, took_ns=(span.end_time or 0) - (span.start_time or 0))

    def shutdown(self) -> None:
        self.export.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.export.force_flush(timeout_millis)


def _exported_copy(span: ReadableSpan, reason: str) -> ReadableSpan:
    """``span`` flagged as sampled (exporters and the batch processor pass only those) and marked kept."""
    assert span.context is not None
    original = span.context
    context = SpanContext(
        original.trace_id,
        original.span_id,
        is_remote=False,
        trace_flags=TraceFlags(original.trace_flags | TraceFlags.SAMPLED),
        trace_state=original.trace_state,
    )
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=span.parent,
        resource=span.resource,
        attributes={**(span.attributes or {}), KEPT_ATTRIBUTE: reason},
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def sampler_for(ratio: float, *, keeps_tail: bool) -> Sampler:
    """The run-level ratio sampler, recording left-out processing spans when some of them may be kept
    (also at a ratio of 1: messages may come from producers that sample less)."""
    if keeps_tail:
        return RecordLeftOutProcessing(ratio)
    return ParentBased(TraceIdRatioBased(ratio))
