"""The custom Dramatiq middleware of rabbit-pipelines, one per module (their order: ``pipelines.app``).

Each class is imported from its module on first use (PEP 562), so importing one middleware module
does not import every other one and what they need (OpenTelemetry, prometheus-client, the runtime).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.middleware.backoff import Backoff
    from pipelines.middleware.correlation import CorrelationId
    from pipelines.middleware.dead_letter import DeadLetter
    from pipelines.middleware.heartbeat import Heartbeat
    from pipelines.middleware.idempotency import Idempotency
    from pipelines.middleware.leases import Leases
    from pipelines.middleware.max_age import MaxAge
    from pipelines.middleware.metrics import Metrics
    from pipelines.middleware.outbox_relay import OutboxRelay
    from pipelines.middleware.payloads import Payloads
    from pipelines.middleware.pipeline_steps import PipelineSteps
    from pipelines.middleware.profiles import Profiles
    from pipelines.middleware.rate_limits import RateLimits
    from pipelines.middleware.schedules import Schedules
    from pipelines.middleware.stalled_runs import StalledRuns
    from pipelines.middleware.step_logs import StepLogs
    from pipelines.middleware.time_limit import ActorTimeLimit
    from pipelines.middleware.timeout import Timeout, TimeoutTooLong
    from pipelines.middleware.tracing import Tracing

__all__ = [
    "ActorTimeLimit",
    "Backoff",
    "CorrelationId",
    "DeadLetter",
    "Heartbeat",
    "Idempotency",
    "Leases",
    "MaxAge",
    "Metrics",
    "OutboxRelay",
    "Payloads",
    "PipelineSteps",
    "Profiles",
    "RateLimits",
    "Schedules",
    "StalledRuns",
    "StepLogs",
    "Timeout",
    "TimeoutTooLong",
    "Tracing",
]

#: The module each public name is imported from on first use (the imports above, for type checkers).
_EXPORTS = {
    "ActorTimeLimit": "pipelines.middleware.time_limit",
    "Backoff": "pipelines.middleware.backoff",
    "CorrelationId": "pipelines.middleware.correlation",
    "DeadLetter": "pipelines.middleware.dead_letter",
    "Heartbeat": "pipelines.middleware.heartbeat",
    "OutboxRelay": "pipelines.middleware.outbox_relay",
    "Idempotency": "pipelines.middleware.idempotency",
    "Leases": "pipelines.middleware.leases",
    "MaxAge": "pipelines.middleware.max_age",
    "Metrics": "pipelines.middleware.metrics",
    "Payloads": "pipelines.middleware.payloads",
    "PipelineSteps": "pipelines.middleware.pipeline_steps",
    "Profiles": "pipelines.middleware.profiles",
    "RateLimits": "pipelines.middleware.rate_limits",
    "Schedules": "pipelines.middleware.schedules",
    "StalledRuns": "pipelines.middleware.stalled_runs",
    "StepLogs": "pipelines.middleware.step_logs",
    "Timeout": "pipelines.middleware.timeout",
    "TimeoutTooLong": "pipelines.middleware.timeout",
    "Tracing": "pipelines.middleware.tracing",
}


if not TYPE_CHECKING:  # type checkers read the imports above; a visible __getattr__ would make any name pass

    def __getattr__(name: str) -> Any:
        """Import a public name's module on first use and keep the name here (later uses are plain lookups)."""
        if name not in _EXPORTS:
            raise AttributeError(f"module 'pipelines.middleware' has no attribute {name!r}")
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
