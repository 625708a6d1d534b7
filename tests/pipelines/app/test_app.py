"""The composition root: one middleware list in one order, one app per process (imports: tests/test_imports.py)."""

from __future__ import annotations

from dramatiq.middleware import Callbacks, Pipelines, ShutdownNotifications, TimeLimit
from periodiq import PeriodiqMiddleware

from pipelines.app import build_app
from pipelines.flow.runtime import Runtime
from pipelines.middleware import (
    ActorTimeLimit,
    Backoff,
    CorrelationId,
    DeadLetter,
    Heartbeat,
    Idempotency,
    Leases,
    MaxAge,
    Metrics,
    Payloads,
    PipelineSteps,
    Profiles,
    RateLimits,
    Schedules,
    StalledRuns,
    StepLogs,
    Timeout,
    Tracing,
)
from pipelines.stack import build_middleware
from pipelines.store import embedded_store
from pipelines.testing import embedded_settings


def test_the_middleware_run_in_one_documented_order() -> None:
    settings = embedded_settings()
    store = embedded_store(namespace="unit", retention_s=60)
    runtime = Runtime(store=store, lease_s=1, max_result_bytes=1)

    order = [type(m) for m in build_middleware(settings, runtime, store)]

    assert order == [
        Profiles,
        CorrelationId,
        Heartbeat,
        MaxAge,
        Timeout,
        ShutdownNotifications,
        Callbacks,
        Pipelines,
        Payloads,
        RateLimits,
        Idempotency,
        PipelineSteps,
        StepLogs,
        StalledRuns,
        Leases,
        Backoff,
        DeadLetter,
        PeriodiqMiddleware,
        Schedules,
        ActorTimeLimit,
    ]


def test_retry_and_time_limit_defaults_come_from_the_config_in_milliseconds() -> None:
    settings = embedded_settings(
        retries={"max_retries": 3, "min_backoff_s": 0.5, "max_backoff_s": 9}, worker={"time_limit_s": 12}
    )

    app = build_app(settings)
    backoff = next(m for m in app.broker.middleware if isinstance(m, Backoff))
    time_limit = next(m for m in app.broker.middleware if isinstance(m, TimeLimit))

    assert (backoff.max_retries, backoff.min_backoff_ms, backoff.max_backoff_ms) == (3, 500, 9000)
    assert time_limit.time_limit == 12000


def test_tracing_and_metrics_come_right_after_the_correlation_id_when_enabled() -> None:
    settings = embedded_settings(telemetry={"enabled": True}, metrics={"enabled": True, "multiprocess": False})

    app = build_app(settings)
    order = [type(m) for m in app.broker.middleware]

    assert order[:6] == [Profiles, CorrelationId, Tracing, Metrics, Heartbeat, MaxAge]
    assert app.runtime.tracer is not None
    assert any(isinstance(listener, Metrics) for listener in app.runtime.listeners)
    app.close()
