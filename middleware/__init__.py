"""The custom Dramatiq middleware of rabbit-pipelines, one per module (their order: ``pipelines.app``)."""

from __future__ import annotations

from middleware.backoff import Backoff
from middleware.correlation import CorrelationId
from middleware.dead_letter import DeadLetter
from middleware.idempotency import Idempotency
from middleware.pipeline_steps import PipelineSteps
from middleware.timeout import Timeout, TimeoutTooLong

__all__ = ["Backoff", "CorrelationId", "DeadLetter", "Idempotency", "PipelineSteps", "Timeout", "TimeoutTooLong"]
