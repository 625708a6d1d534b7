"""The OpenTelemetry tracer of an app, built from ``[telemetry]``: OTLP export in batches, sampling.

Export happens on the SDK's batch processor thread: processing never waits for the collector, and a
collector that is down costs dropped spans, never a failed or slowed message.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from pipelines.config.sections import TelemetryConfig
from pipelines.errors import ConfigError
from pipelines.observability.tail_sampling import KeepFailedAndSlow, TailKeeping, sampler_for

#: Instrumentation name of the tracer.
TRACER_NAME = "rabbit-pipelines"
#: Seconds an export may take before the exporter gives up on that batch.
EXPORT_TIMEOUT_S = 10


def make_exporter(config: TelemetryConfig) -> SpanExporter:
    """The OTLP exporter ``config.protocol`` names.

    Raises:
        ConfigError: gRPC was asked for but its exporter is not installed.
    """
    endpoint = config.endpoint.rstrip("/")
    if config.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise ConfigError(
                "telemetry.protocol = 'grpc' needs the gRPC exporter: pip install 'rabbit-pipelines[grpc]', "
                "or use 'http/protobuf'."
            ) from None
        return GrpcExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=EXPORT_TIMEOUT_S)


def make_tracer_provider(config: TelemetryConfig, *, exporter: SpanExporter | None = None) -> TracerProvider:
    """A tracer provider exporting in batches to ``config.endpoint`` (or to ``exporter``): the sampled
    share of runs, and every failed or slow step of the others (see ``pipelines.observability.tail_sampling``)."""
    resource = Resource.create({"service.name": config.service_name, **config.resource_attributes})
    keeping = tail_keeping(config)
    provider = TracerProvider(resource=resource, sampler=sampler_for(config.sample_ratio, keeps_tail=keeping.keeps_any))
    provider.add_span_processor(KeepFailedAndSlow(BatchSpanProcessor(exporter or make_exporter(config)), keeping))
    return provider


def tail_keeping(config: TelemetryConfig) -> TailKeeping:
    """The spans of runs left out by sampling that ``config`` keeps."""
    return TailKeeping(keep_failed=config.keep_failed, slower_than_s=config.keep_slower_than_s)


def install(provider: TracerProvider) -> trace.Tracer:
    """Our tracer; ``provider`` also becomes the process's global one unless the process set its own,
    so spans that actor code starts land in the same traces."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    return provider.get_tracer(TRACER_NAME)
