"""The custom Dramatiq middleware of rabbit-pipelines, one per module (their order: ``pipelines.app``)."""

from __future__ import annotations

from middleware.backoff import Backoff
from middleware.correlation import CorrelationId
from middleware.dead_letter import DeadLetter
from middleware.idempotency import Idempotency
from middleware.leases import Leases
from middleware.metrics import Metrics
from middleware.payloads import Payloads
from middleware.pipeline_steps import PipelineSteps
from middleware.profiles import Profiles
from middleware.schedules import Schedules
from middleware.timeout import Timeout, TimeoutTooLong
from middleware.tracing import Tracing

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
