"""rabbit-pipelines: background jobs and event pipelines on Dramatiq and RabbitMQ exchanges.

import dramatiq
import pipelines

app = pipelines.configure()          # reads config.toml; its broker becomes Dramatiq's

@dramatiq.actor
def charge(order_id): ...

run = pipelines.chain(charge.message(), pipelines.fan_out(ship.message(), email.message())).run(42)
run.result(timeout_s=30)
"""

from __future__ import annotations

from typing import Any

from pipelines.app import App, build_app, configure, current_app
from pipelines.composition import Chain, Node, Parallel, Step, chain, chord, fan_out, group, map, step
from pipelines.config import Settings, load_settings
from pipelines.context import correlation, current_correlation_id
from pipelines.dlq import DeadLetter, DeadLetterQueues
from pipelines.errors import (
    BrokerAccessRefused,
    BrokerUnavailable,
    Cancelled,
    CannotReplay,
    ConfigError,
    DeadLetterError,
    DeadLetterNotFound,
    DefinitionError,
    InvalidActorOption,
    MessageTooLarge,
    PipelinesError,
    PublishError,
    QueueFull,
    ResultTooLarge,
    RunCancelled,
    RunError,
    RunFailed,
    RunNotFound,
    RunTimeout,
    ServiceUnavailable,
    StoreUnavailable,
    UnknownActor,
    UnknownPipeline,
    Unroutable,
)
from pipelines.priority import DEFAULT_PRIORITY, HIGH_PRIORITY, LOW_PRIORITY
from pipelines.progress import check_cancelled, report_progress
from pipelines.runs import Run
from pipelines.store.base import RunStatus, StepStatus

__all__ = [
    "DEFAULT_PRIORITY",
    "HIGH_PRIORITY",
    "LOW_PRIORITY",
    "App",
    "BrokerAccessRefused",
    "BrokerUnavailable",
    "Cancelled",
    "CannotReplay",
    "Chain",
    "ConfigError",
    "DeadLetter",
    "DeadLetterError",
    "DeadLetterNotFound",
    "DeadLetterQueues",
    "DefinitionError",
    "InvalidActorOption",
    "MessageTooLarge",
    "Node",
    "Parallel",
    "PipelinesError",
    "PublishError",
    "QueueFull",
    "ResultTooLarge",
    "Run",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunNotFound",
    "RunStatus",
    "RunTimeout",
    "ServiceUnavailable",
    "Settings",
    "Step",
    "StepStatus",
    "StoreUnavailable",
    "UnknownActor",
    "UnknownPipeline",
    "Unroutable",
    "build_app",
    "chain",
    "check_cancelled",
    "chord",
    "configure",
    "correlation",
    "current_app",
    "current_correlation_id",
    "fan_out",
    "group",
    "load_settings",
    "map",
    "publish",
    "report_progress",
    "step",
]


def publish(topic: str, payload: Any, *, app: App | None = None) -> str:
    """Publish a domain event (``order.placed``) to every subscribed actor; returns the message id.

    Raises:
        Unroutable: No actor subscribes to a pattern matching ``topic``.
    """
    return (app or current_app()).publish(topic, payload)
