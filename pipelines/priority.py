"""Priority classes of actors, for Dramatiq's own ``priority`` actor option (lower runs first).

``@dramatiq.actor(priority=HIGH_PRIORITY)``. Each actor has its own RabbitMQ queue with its own prefetch
window, so high-priority messages are delivered to a worker however many low-priority ones wait in
their queue, and the worker's in-memory work queue hands them to the next free thread first. For
strict isolation, give high-priority actors their own ``queue_name`` and their own workers
(``dramatiq actors --queues urgent``). Quorum queues (the default) have no per-message priorities.
"""

from __future__ import annotations

from typing import Final

HIGH_PRIORITY: Final = -10
DEFAULT_PRIORITY: Final = 0
LOW_PRIORITY: Final = 10
