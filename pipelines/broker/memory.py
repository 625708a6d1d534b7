"""The embedded broker: Dramatiq's StubBroker with the same exchanges, bindings and routing.

Nothing leaves the process. A publish is matched against the same bindings RabbitMQ would use (see
``pipelines.topology``) and each matching actor gets its own resolved copy, so a fan-out is still one
publish and an event still reaches every subscriber. Delayed messages wait in the worker's memory (the
stub's delay queues), which is fine for tests and demos and is why production uses RabbitMQ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import current_millis, dq_name

from pipelines import options as opt
from pipelines.broker.common import TopologyCache, check_size, event_message, validate_actor
from pipelines.codec import encode_message
from pipelines.config import BrokerConfig
from pipelines.delivery import resolve
from pipelines.errors import DefinitionError, Unroutable
from pipelines.routing import route_of, topic_matches
from pipelines.topology import Topology


class MemoryBroker(StubBroker):
    """In-process broker routing like the namespace's exchanges (see the module docstring)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        namespace: str,
        middleware: list[dramatiq.Middleware] | None = None,
    ) -> None:
        super().__init__(middleware=middleware, fail_fast_default=False)
        self.config = config
        self.namespace = namespace
        self.actor_options |= {opt.SUBSCRIBE}
        self.publish_count = 0
        self._topology = TopologyCache(namespace=namespace, config=config)

    def declare_actor(self, actor: dramatiq.Actor[Any, Any]) -> None:
        validate_actor(actor, namespace=self.namespace)
        super().declare_actor(actor)

    @property
    def topology(self) -> Topology:
        """What RabbitMQ would declare for these actors; routing follows its bindings."""
        return self._topology.get(self.actors)

    def _targets(self, message: dramatiq.Message[Any]) -> list[str]:
        topology = self.topology
        route = route_of(message)
        exchange = topology.work_exchange if route.exchange == "work" else topology.events_exchange
        queues = {
            binding.queue
            for binding in topology.bindings
            if binding.exchange == exchange and topic_matches(binding.routing_key, route.routing_key)
        }
        return [actor for actor, queue in topology.actor_queues.items() if queue in queues]

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        """Route one message to every matching actor (``delay`` in milliseconds)."""
        return self.enqueue_many([message], delay=delay)[0]

    def enqueue_many(
        self, messages: Sequence[dramatiq.Message[Any]], *, delay: int | None = None
    ) -> list[dramatiq.Message[Any]]:
        """Route messages like the exchanges would.

        Raises:
            MessageTooLarge: A body is over ``broker.max_message_bytes``.
            Unroutable: No actor matches a message's routing key.
        """
        routed = []
        for message in messages:
            if delay and route_of(message).exchange != "work":
                raise DefinitionError("Events cannot be delayed; delay the actor that publishes them.")
            check_size(message, encode_message(message), self.config.max_message_bytes)
            targets = self._targets(message)
            if not targets:
                raise Unroutable(
                    f"No queue in namespace {self.namespace!r} is bound for {route_of(message).routing_key}: no "
                    "declared actor has that name, or no actor subscribes to that topic."
                )
            routed.append((message, targets))
        for message, targets in routed:
            self.emit_before("enqueue", message, delay)
            self.publish_count += 1
            for actor_name in targets:
                group = self.actors[actor_name].queue_name
                copy = resolve(message, actor_name=actor_name, queue_name=group)
                queue = group
                if delay:
                    queue = dq_name(group)
                    copy = copy.copy(queue_name=queue, options={opt.ETA: current_millis() + delay})
                self.queues[queue].put(encode_message(copy))
            self.emit_after("enqueue", message, delay)
        return [message for message, _ in routed]

    def publish_event(
        self, topic: str, payload: Any, *, options: dict[str, Any] | None = None
    ) -> dramatiq.Message[Any]:
        """Publish a domain event to every subscribed actor (see ``ExchangeBroker.publish_event``)."""
        return self.enqueue(event_message(topic, payload, options))
