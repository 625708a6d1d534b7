"""rabbit-pipelines: background jobs and event pipelines on Dramatiq and RabbitMQ exchanges.

import dramatiq
import pipelines

app = pipelines.configure()          # reads config.toml; its broker becomes Dramatiq's

@dramatiq.actor
def charge(order_id): ...

run = pipelines.chain(charge.message(), pipelines.fan_out(ship.message(), email.message())).run(42)
run.result(timeout_s=30)

Importing the package imports none of the names below (PEP 562): each is imported from its module on
first use, so ``import pipelines`` and ``from pipelines import options`` stay cheap for processes that
need little (the CLI's ``--help``, a producer that only publishes) and no import order can form a cycle.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.app import App, build_app, configure, current_app
    from pipelines.composition import Chain, Node, Parallel, Step, chain, chord, fan_out, for_each, group, step
    from pipelines.config.settings import Settings, load_settings
    from pipelines.context import correlation, current_correlation_id
    from pipelines.dead_letters.queues import DeadLetter, DeadLetterQueues
    from pipelines.effects import NoEffectKey, current_effect_key
    from pipelines.errors import (
        AmbiguousId,
        BrokerAccessRefused,
        BrokerUnavailable,
        Cancelled,
        CannotReplay,
        CannotRerun,
        ClaimLost,
        ConfigError,
        DeadLetterError,
        DeadLetterNotFound,
        DefinitionError,
        InvalidActorOption,
        InvalidQuery,
        MaxAgeExceeded,
        MessageTooLarge,
        PipelinesError,
        PublishError,
        QueueFull,
        ResultTooLarge,
        RunCancelled,
        RunError,
        RunFailed,
        RunNotFound,
        RunNotInStore,
        RunTimeout,
        ServiceUnavailable,
        StoreUnavailable,
        TopologyMismatch,
        UnknownActor,
        UnknownPipeline,
        Unroutable,
    )
    from pipelines.handling.guards import observational
    from pipelines.priority import DEFAULT_PRIORITY, HIGH_PRIORITY, LOW_PRIORITY
    from pipelines.progress import check_cancelled, report_progress
    from pipelines.runs import Run
    from pipelines.store.base import RunPage, RunStatus, RunSummary, StepStatus
    from pipelines.store.step_transaction import transaction

__all__ = [
    "DEFAULT_PRIORITY",
    "HIGH_PRIORITY",
    "LOW_PRIORITY",
    "AmbiguousId",
    "App",
    "BrokerAccessRefused",
    "BrokerUnavailable",
    "Cancelled",
    "CannotReplay",
    "CannotRerun",
    "Chain",
    "ClaimLost",
    "ConfigError",
    "DeadLetter",
    "DeadLetterError",
    "DeadLetterNotFound",
    "DeadLetterQueues",
    "DefinitionError",
    "InvalidActorOption",
    "InvalidQuery",
    "MaxAgeExceeded",
    "MessageTooLarge",
    "NoEffectKey",
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
    "RunNotInStore",
    "RunPage",
    "RunStatus",
    "RunSummary",
    "RunTimeout",
    "ServiceUnavailable",
    "Settings",
    "Step",
    "StepStatus",
    "StoreUnavailable",
    "TopologyMismatch",
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
    "current_effect_key",
    "fan_out",
    "for_each",
    "group",
    "load_settings",
    "observational",
    "publish",
    "publish_async",
    "report_progress",
    "step",
    "transaction",
]

#: The module each public name is imported from on first use (the imports above, for type checkers).
_MODULES = {
    "pipelines.app": ("App", "build_app", "configure", "current_app"),
    "pipelines.composition": (
        "Chain",
        "Node",
        "Parallel",
        "Step",
        "chain",
        "chord",
        "fan_out",
        "for_each",
        "group",
        "step",
    ),
    "pipelines.config.settings": ("Settings", "load_settings"),
    "pipelines.context": ("correlation", "current_correlation_id"),
    "pipelines.effects": ("NoEffectKey", "current_effect_key"),
    "pipelines.store.step_transaction": ("transaction",),
    "pipelines.handling.guards": ("observational",),
    "pipelines.dead_letters.queues": ("DeadLetter", "DeadLetterQueues"),
    "pipelines.errors": (
        "AmbiguousId",
        "BrokerAccessRefused",
        "BrokerUnavailable",
        "Cancelled",
        "CannotReplay",
        "CannotRerun",
        "ClaimLost",
        "ConfigError",
        "DeadLetterError",
        "DeadLetterNotFound",
        "DefinitionError",
        "InvalidActorOption",
        "InvalidQuery",
        "MaxAgeExceeded",
        "MessageTooLarge",
        "PipelinesError",
        "PublishError",
        "QueueFull",
        "ResultTooLarge",
        "RunCancelled",
        "RunError",
        "RunFailed",
        "RunNotFound",
        "RunNotInStore",
        "RunTimeout",
        "ServiceUnavailable",
        "StoreUnavailable",
        "TopologyMismatch",
        "UnknownActor",
        "UnknownPipeline",
        "Unroutable",
    ),
    "pipelines.priority": ("DEFAULT_PRIORITY", "HIGH_PRIORITY", "LOW_PRIORITY"),
    "pipelines.progress": ("check_cancelled", "report_progress"),
    "pipelines.runs": ("Run",),
    "pipelines.store.base": ("RunPage", "RunStatus", "RunSummary", "StepStatus"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

#: Old names still importable, outside ``__all__``: old name → (new name, why it changed).
_RENAMED = {"map": ("for_each", "`map` shadows the built-in of the same name")}


if not TYPE_CHECKING:  # type checkers read the imports above; a visible __getattr__ would make any name pass

    def __getattr__(name: str) -> Any:
        """Import a public name's module on first use and keep the name here (later uses are plain lookups)."""
        if name in _RENAMED:
            new, why = _RENAMED[name]
            warnings.warn(f"pipelines.{name} is now pipelines.{new}: {why}.", DeprecationWarning, stacklevel=2)
            value = __getattr__(new)
        elif name in _EXPORTS:
            value = getattr(importlib.import_module(_EXPORTS[name]), name)
        else:
            raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))


def publish(topic: str, payload: Any, *, app: App | None = None) -> str:
    """Publish a domain event (``order.placed``) to every subscribed actor; returns the message id.

    Raises:
        Unroutable: No actor subscribes to a pattern matching ``topic``.
    """
    from pipelines.current import configured_app

    return (app or configured_app()).publish(topic, payload)


async def publish_async(topic: str, payload: Any, *, app: App | None = None) -> str:
    """[`publish`][pipelines.publish] for asyncio code: the event loop runs on while the event is published and
    confirmed."""
    from pipelines.current import configured_app

    return await (app or configured_app()).publish_async(topic, payload)
