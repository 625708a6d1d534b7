"""The custom Dramatiq middleware of rabbit-pipelines, one per module (their order: ``pipelines.app``)."""

from __future__ import annotations

from pipelines.middleware.backoff import Backoff
from pipelines.middleware.correlation import CorrelationId
from pipelines.middleware.dead_letter import DeadLetter
from pipelines.middleware.idempotency import Idempotency
from pipelines.middleware.leases import Leases
from pipelines.middleware.metrics import Metrics
from pipelines.middleware.payloads import Payloads
from pipelines.middleware.pipeline_steps import PipelineSteps
from pipelines.middleware.profiles import Profiles
from pipelines.middleware.schedules import Schedules
from pipelines.middleware.timeout import Timeout, TimeoutTooLong
from pipelines.middleware.tracing import Tracing

__all__ = [
    "Backoff",
    "CorrelationId",
    "DeadLetter",
    "Idempotency",
    "Leases",
    "Metrics",
    "Payloads",
    "PipelineSteps",
    "Profiles",
    "Schedules",
    "Timeout",
    "TimeoutTooLong",
    "Tracing",
]
