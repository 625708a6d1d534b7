"""The workers running in this process, so that an actor nobody here will consume is reported, and
the threads that run long-running jobs are known (``window``).

Dramatiq's worker starts a consumer for every queue name declared while it runs, unless it was
started for other queue names (``dramatiq --queues``): then an actor declared on a new queue name has
a RabbitMQ queue that no worker of this process reads, and its messages wait for a worker elsewhere.
That may be intended (another deployment consumes it), so it is a warning, not an error.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import dramatiq

logger = logging.getLogger(__name__)


class RunningWorkers:
    """Workers between their boot and their shutdown (see the module docstring)."""

    def __init__(self) -> None:
        self._workers: weakref.WeakSet[dramatiq.Worker] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, worker: dramatiq.Worker) -> None:
        with self._lock:
            self._workers.add(worker)

    def discard(self, worker: dramatiq.Worker) -> None:
        with self._lock:
            self._workers.discard(worker)

    def consumed(self) -> set[str] | None:
        """The queue names the running workers consume, or None when no worker runs here."""
        with self._lock:
            workers = list(self._workers)
        if not workers:
            return None
        return {name for worker in workers for name in list(worker.consumers)}

    def threads(self) -> int:
        """The worker threads running here (1 when no worker runs: a consumer started on its own)."""
        with self._lock:
            workers = list(self._workers)
        return sum(int(getattr(worker, "worker_threads", 1)) for worker in workers) or 1

    def warn_unconsumed(self, actor: dramatiq.Actor[Any, Any]) -> None:
        """Warn when workers run here and none of them consumes ``actor``'s queue name."""
        consumed = self.consumed()
        if consumed is None or actor.queue_name in consumed:
            return
        logger.warning(
            "Actor %r is declared on queue %r, which no worker of this process consumes (they consume %s): "
            "its messages wait until a worker started for it runs (dramatiq MODULE --queues %s).",
            actor.actor_name,
            actor.queue_name,
            ", ".join(sorted(consumed)) or "nothing",
            actor.queue_name,
        )
