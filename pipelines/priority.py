"""Priority classes of actors, for Dramatiq's own ``priority`` actor option (lower runs first).

``@dramatiq.actor(priority=HIGH_PRIORITY)``. Each actor has its own RabbitMQ queue with its own prefetch
window, so high-priority messages are delivered to a worker however many low-priority ones wait in
their queue, and the worker's in-memory work queue hands them to the next free thread first. For
strict isolation, give high-priority actors their own ``queue_name`` and their own workers
(``dramatiq actors --queues urgent``). Quorum queues (the default) have no per-message priorities, so
Dramatiq's ``broker_priority`` message option is refused where it is given rather than ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pipelines import options as opt
from pipelines.errors import DefinitionError

HIGH_PRIORITY: Final = -10
"""Before the default: a worker's free thread takes these messages first."""
DEFAULT_PRIORITY: Final = 0
"""Dramatiq's default priority, for an actor that gives none."""
LOW_PRIORITY: Final = 10
"""After the default: these messages wait while others are ready."""


def refuse_broker_priority(options: Mapping[str, Any], owner: str) -> None:
    """Refuse Dramatiq's ``broker_priority`` (on an actor or a message) with what to use instead.

    Raises:
        DefinitionError: ``options`` has ``broker_priority``.
    """
    if opt.BROKER_PRIORITY in options:
        raise DefinitionError(
            f"{owner}: broker_priority={options[opt.BROKER_PRIORITY]!r} is not supported: quorum queues (the "
            "default) keep no per-message priority, so it would be ignored. Give the actor priority="
            "pipelines.HIGH_PRIORITY, or a queue_name of its own served by its own workers."
        )
