"""A namespace's RabbitMQ queues read and emptied: depths, consumers, Dramatiq's message counts, flushes.

What Dramatiq's ``join()`` and ``flush()``, the CLI and the console ask of the queues; the broker
(``pipelines.broker.rabbitmq.broker``) has it as a base, and reads the queues through its declarer.
"""

from __future__ import annotations

from typing import Any

import dramatiq

from pipelines.broker.rabbitmq.declaring import Declarer
from pipelines.wire.naming import dead_letter_queue, readers_queue
from pipelines.wire.topology import Topology


class QueueInspection:
    """Depths, consumers and flushes of the queues of a broker's topology (a base of ``ExchangeBroker``)."""

    _declarer: Declarer
    actors: dict[str, dramatiq.Actor[Any, Any]]

    @property
    def topology(self) -> Topology:
        raise NotImplementedError

    def queue_depth(self, queue: str) -> int | None:
        """Messages ready in ``queue``, or None if it does not exist."""
        return self._declarer.depth(queue)

    def queue_consumers(self, queue: str) -> int | None:
        """Consumers reading ``queue`` now (in any process), or None if it does not exist; the workers
        reading a long-running queue (which they poll, see ``polling``) count as its consumers."""
        consumers = self._declarer.consumers(queue)
        if consumers is None or queue not in self._long_running_queues():
            return consumers
        return consumers + (self._declarer.consumers(readers_queue(queue)) or 0)

    def _long_running_queues(self) -> set[str]:
        topology = self.topology
        return {
            queue
            for actor, profile in topology.actor_profiles.items()
            if profile == "long_running"
            for queue in topology.consume_queues[actor]
        }

    def get_queue_message_counts(self, queue_name: str) -> tuple[int, int, int]:
        """(ready, delayed, dead) messages of the actors in Dramatiq queue ``queue_name``.

        The delay tiers are shared by the namespace's actors, so ``delayed`` counts every message
        waiting in them (retries and delayed sends): ``join()`` waits for those too, as Dramatiq's
        does for its delay queues.
        """
        topology = self.topology
        actors = [a for a in topology.actor_queues if self.actors[a].queue_name == queue_name]
        ready = sum(self.queue_depth(q) or 0 for a in actors for q in topology.consume_queues[a])
        delayed = sum(self.queue_depth(q.name) or 0 for q in topology.queues if q.role == "delay")
        dead = sum(self.queue_depth(dead_letter_queue(topology.actor_queues[a])) or 0 for a in actors)
        return ready, delayed, dead

    def flush(self, queue_name: str) -> None:
        topology = self.topology
        for actor, queue in topology.actor_queues.items():
            if self.actors[actor].queue_name == queue_name:
                for name in (*topology.consume_queues[actor], dead_letter_queue(queue)):
                    self._declarer.purge(name)

    def flush_all(self) -> None:
        for queue in self.topology.queues:
            self._declarer.purge(queue.name)
