"""Declaring a namespace's exchanges, queues and bindings, and the queue operations that go with them.

Declarations are idempotent and made once per broker, lazily, before the first publish or consume;
they are made again after RabbitMQ says a queue is missing (a 404, or a returned publish). A queue
that exists with other arguments (an actor's profile or the queue type changed) is refused by
RabbitMQ, which becomes a TopologyMismatch that says how to resolve it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pika.exceptions

from pipelines.broker.rabbitmq.confirms import CONNECTION_ERRORS
from pipelines.broker.rabbitmq.connections import Connections
from pipelines.errors import TopologyMismatch
from pipelines.wire.topology import Topology

#: AMQP reply code of a declaration that contradicts what exists.
PRECONDITION_FAILED = 406
#: How many times declarations are tried, each on a fresh connection after the first failed.
MAX_DECLARE_ATTEMPTS = 2


class Declarer:
    """Declares a namespace's topology in RabbitMQ (see the module docstring)."""

    def __init__(self, *, connections: Connections, namespace: str) -> None:
        self.connections = connections
        self.namespace = namespace
        self._lock = threading.Lock()
        self._declared: set[str] = set()
        #: The last topology found declared in full: asked again (before every publish), it is at once.
        self._complete: Topology | None = None

    def ensure(self, topology: Topology) -> None:
        """Declare whatever of ``topology`` is not declared yet.

        Raises:
            TopologyMismatch: Something exists with other arguments.
            BrokerUnavailable: RabbitMQ did not answer after ``MAX_DECLARE_ATTEMPTS``.
        """
        if topology is self._complete:
            return
        wanted = {e.name for e in topology.exchanges} | {q.name for q in topology.queues}
        if wanted <= self._declared:
            with self._lock:  # not after a forget() that came meanwhile
                if wanted <= self._declared:
                    self._complete = topology
            return
        with self._lock:
            for attempt in range(1, MAX_DECLARE_ATTEMPTS + 1):
                try:
                    self._declare(topology)
                except pika.exceptions.ChannelClosedByBroker as e:
                    if e.reply_code != PRECONDITION_FAILED:
                        raise self.connections.unavailable(e) from None
                    raise TopologyMismatch(
                        f"RabbitMQ refuses to declare part of namespace {self.namespace!r}: {e.reply_text}. It "
                        "exists with other arguments: an actor's profile, [broker] queue_type or "
                        "quorum_initial_group_size changed since. "
                        "Drain and delete the old queue (rabbitmqctl delete_queue NAME), or restore the setting."
                    ) from None
                except CONNECTION_ERRORS as e:
                    self.connections.drop()
                    if attempt == MAX_DECLARE_ATTEMPTS:
                        raise self.connections.unavailable(e) from None
                else:
                    self._declared |= wanted
                    return

    def _declare(self, topology: Topology) -> None:
        channel = self.connections.alive().declare_channel
        for exchange in topology.exchanges:
            channel.exchange_declare(exchange.name, exchange.type, durable=True)
        for queue in topology.queues:
            channel.queue_declare(queue.name, durable=True, arguments=dict(queue.arguments))
        for binding in topology.bindings:
            channel.queue_bind(
                binding.queue,
                binding.exchange,
                routing_key=binding.routing_key,
                arguments=dict(binding.arguments),
            )

    def forget(self) -> None:
        """Make the next :meth:`ensure` declare everything again (after a 404 or a return)."""
        with self._lock:
            self._complete = None
            self._declared.clear()

    def delete(self, topology: Topology, *, also: Sequence[str] = ()) -> None:
        """Delete every queue and exchange of ``topology``, and the queues ``also`` (tests and decommissioning)."""
        channel = self.connections.alive().declare_channel
        for name in (*(queue.name for queue in topology.queues), *also):
            channel.queue_delete(name)
        for exchange in topology.exchanges:
            channel.exchange_delete(exchange.name)
        self.forget()

    def depth(self, queue: str) -> int | None:
        """Messages ready in ``queue``, or None if it does not exist."""
        found = self._inspect(queue)
        return None if found is None else int(found.message_count)

    def consumers(self, queue: str) -> int | None:
        """Consumers reading ``queue`` now, or None if it does not exist."""
        found = self._inspect(queue)
        return None if found is None else int(found.consumer_count)

    def _inspect(self, queue: str) -> Any:
        """RabbitMQ's answer to a passive declaration of ``queue`` (its counts), or None if it does not exist."""
        try:
            return self.connections.on_channel(lambda channel: channel.queue_declare(queue, passive=True).method)
        except pika.exceptions.ChannelClosedByBroker:
            return None

    def purge(self, queue: str) -> int:
        """Delete every message of ``queue``; returns how many there were (0 if it does not exist)."""
        try:
            return self.connections.on_channel(lambda channel: int(channel.queue_purge(queue).method.message_count))
        except pika.exceptions.ChannelClosedByBroker:
            return 0
