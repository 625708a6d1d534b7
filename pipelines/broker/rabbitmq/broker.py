"""The RabbitMQ broker: Dramatiq's ``RabbitmqBroker``, its messages routed through exchanges.

This class is what Dramatiq and the middleware talk to; it composes the parts that do the work:
``connections`` (each thread's publishing connection), ``declaring`` (the namespace's topology),
``publishing`` (confirmed batches), ``consuming`` (with ``settling``) and ``dead_letters``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import current_millis
from dramatiq.errors import BrokerConnectionError, ConnectionFailed

from pipelines import options as opt
from pipelines.broker.common import HookDispatch, TopologyCache, check_size, event_message, validate_actor
from pipelines.broker.rabbitmq.confirms import Outgoing
from pipelines.broker.rabbitmq.connections import Connections, dramatiq_error, node_parameters
from pipelines.broker.rabbitmq.consuming import Consumption, GroupConsumer
from pipelines.broker.rabbitmq.dead_letter_marks import DeadLetterMarks
from pipelines.broker.rabbitmq.dead_letters import RabbitDeadLetters
from pipelines.broker.rabbitmq.declaring import Declarer
from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.broker.rabbitmq.inspection import QueueInspection
from pipelines.broker.rabbitmq.publishing import Publishing
from pipelines.broker.rabbitmq.window import LongRunningWindow
from pipelines.broker.rabbitmq.workers import RunningWorkers
from pipelines.config.sections import BrokerConfig
from pipelines.dead_letters.reasons import DeadLetterReason, RawDeadLetter
from pipelines.errors import BrokerAccessRefused, BrokerUnavailable, DefinitionError
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.proxy import WorkQueue
from pipelines.sending.outbound import Outbound
from pipelines.store.roles import OnceMarks
from pipelines.wire.codec import encode_message, warn_custom_encoder
from pipelines.wire.naming import readers_queue
from pipelines.wire.routing import route_of
from pipelines.wire.topology import DELAY_TIER_HEADER, Topology

logger = logging.getLogger(__name__)


class ExchangeBroker(HookDispatch, QueueInspection, RabbitmqBroker):
    """RabbitMQ broker that routes through the namespace's exchanges (see ``pipelines.broker.rabbitmq``)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        namespace: str,
        outbound: Outbound,
        middleware: list[dramatiq.Middleware] | None = None,
        marks: OnceMarks | None = None,
    ) -> None:
        super().__init__(url=list(config.node_urls), confirm_delivery=config.confirm_delivery, middleware=middleware)
        self.dead_letter_marks = DeadLetterMarks(marks)
        """Which deliveries were dead-lettered already (a redelivered copy is not dead-lettered again)."""
        self.config = config
        self.namespace = namespace
        self.outbound = outbound
        """Prepares every message before it is encoded (see ``pipelines.sending.outbound``)."""
        self.actor_options |= {opt.SUBSCRIBE, opt.BROKER_PRIORITY}  # the latter refused with a sentence
        self.parameters = node_parameters(config)
        self.thread_connections = Connections(parameters=self.parameters, config=config)
        """Each thread's publishing connection (Dramatiq's own ``connections`` stay unused)."""
        self._topology = TopologyCache(namespace=namespace, config=config)
        self._consumers: weakref.WeakSet[GroupConsumer] = weakref.WeakSet()
        """The running consumers of this process, which take actors declared after they started."""
        self._consumers_lock = threading.Lock()
        self._workers = RunningWorkers()
        connections = self.thread_connections
        self._declarer = Declarer(connections=connections, namespace=namespace)
        self._publishing = Publishing(connections=connections, declarer=self._declarer, topology=lambda: self.topology)
        self._dead_letters = RabbitDeadLetters(
            connections=connections, declarer=self._declarer, publishing=self._publishing, ensure=self.ensure_topology
        )
        self._window = LongRunningWindow(capacity=1, on_free=self._wake_readers)
        """The process's long-running window, shared by every consumer; it outlives consumers that reconnect."""

    @property
    def publish_count(self) -> int:
        """Publishes made so far (a fan-out is one)."""
        return self._publishing.count

    @property
    def confirm_waits(self) -> int:
        """Publisher-confirm waits so far: one per batch written and confirmed together (the
        publishes per wait show how much publishing threads share)."""
        return self._publishing.confirm_waits

    # -- declaration ---------------------------------------------------------------------------

    def declare_actor(self, actor: dramatiq.Actor[Any, Any]) -> None:
        validate_actor(actor, namespace=self.namespace)
        super().declare_actor(actor)
        # Declared after a worker started: its running consumer of this queue name reads it too.
        with self._consumers_lock:
            consumers = [c for c in self._consumers if c.queue_name == actor.queue_name]
            if consumers:
                queues = self._actor_queues(actor.queue_name, only=actor.actor_name)
                for consumer in consumers:
                    consumer.add_queues(queues)
        self._workers.warn_unconsumed(actor)

    def declare_queue(self, queue_name: str, *, ensure: bool = False) -> None:
        # A Dramatiq queue name is a group of actor queues; delays use the delay tiers, so no
        # per-queue delay queue is announced to the worker.
        if queue_name not in self.queues:
            self.emit_before("declare_queue", queue_name)
            self.queues.add(queue_name)
            self.emit_after("declare_queue", queue_name)
        if ensure:
            self.ensure_topology()

    @property
    def topology(self) -> Topology:
        """Everything this broker declares, for the actors declared so far."""
        return self._topology.get(self.actors)

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        if signal == "worker_boot":
            self._check_access()
            warn_custom_encoder()
            self._workers.add(args[0])
            self._window.stopping = False  # a worker started again in this process takes jobs again
        elif signal == "worker_shutdown":
            self._workers.discard(args[0])
        super().emit_before(signal, *args, **kwargs)
        if signal == "worker_shutdown" and args:
            self._stop_consuming(args[0])

    def _stop_consuming(self, worker: dramatiq.Worker) -> None:
        """Before the worker stops its threads: take nothing more, and return what no thread started yet
        (Dramatiq stops its consumers only after the threads, while running jobs end)."""
        self._window.stopping = True
        for consumer in self._running_consumers():
            consumer.wake()
        for message in WorkQueue(worker).take_waiting():
            if isinstance(message, Delivery):
                message.consumer.requeue([message])
            elif isinstance(message, LocalDelivery):  # nothing of it is in RabbitMQ: published
                message.hand_back(self)

    def _check_access(self) -> None:
        """A worker whose login RabbitMQ refuses stops at boot with the reason (the ``dramatiq`` CLI
        exits with status 3); one that cannot reach RabbitMQ yet starts, and its consumers keep trying."""
        try:
            self.ensure_topology()
        except BrokerAccessRefused as e:
            raise dramatiq_error(BrokerConnectionError, str(e)) from None
        except BrokerUnavailable as e:
            logger.warning("%s The worker keeps trying.", e)

    def ensure_topology(self) -> None:
        """Declare whatever of the topology this broker has not declared yet (idempotent)."""
        self._declarer.ensure(self.topology)

    def forget_declarations(self) -> None:
        """Make the next publish or consume declare everything again (after a 404 or a return)."""
        self._declarer.forget()

    def delete_topology(self) -> None:
        """Delete every queue and exchange of this namespace (tests and decommissioning), the readers
        queues of its long-running queues included (see ``polling``)."""
        self._declarer.delete(self.topology, also=sorted(map(readers_queue, self._long_running_queues())))

    # -- publishing ----------------------------------------------------------------------------

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        """Publish one message (``delay`` in milliseconds); see :meth:`enqueue_many`."""
        return self.enqueue_many([message], delay=delay)[0]

    def prepare(self, message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
        """``message`` as it would be published, not published (see ``PipelineBroker.prepare``)."""
        [(prepared, _)] = self.outbound.prepare(self.actors, [message], accepted=self.actor_options)
        return prepared

    def enqueue_many(
        self, messages: Sequence[dramatiq.Message[Any]], *, delay: int | None = None
    ) -> list[dramatiq.Message[Any]]:
        """Publish messages under one confirm wait; returns them as published (with an ordered actor's
        partition chosen, and its branches of a fan-out split off as messages of their own).

        Raises:
            MessageTooLarge: A body is over ``broker.max_message_bytes``.
            Unroutable: No queue is bound for a message's routing key (no such actor or subscriber).
            BrokerUnavailable: RabbitMQ did not answer after ``MAX_PUBLISH_ATTEMPTS`` connections.
        """
        declaring_from = current_millis()
        self.ensure_topology()
        declared_ms = current_millis() - declaring_from
        if declared_ms:  # a first publish declares the topology: that wait is not the messages' age
            messages = [m.copy(message_timestamp=m.message_timestamp + declared_ms) for m in messages]
        topology = self.topology
        sent: list[tuple[dramatiq.Message[Any], int | None]] = []
        batch: list[Outgoing] = []
        for prepared, wait in self.outbound.prepare(self.actors, messages, delay, accepted=self.actor_options):
            message = prepared
            headers = None
            route = route_of(message)
            exchange = topology.work_exchange if route.exchange == "work" else topology.events_exchange
            if wait is not None and wait > 0:
                if route.exchange != "work":
                    raise DefinitionError("Events cannot be delayed; delay the actor that publishes them.")
                message = message.copy(options={opt.ETA: current_millis() + wait})
                exchange = topology.delay_exchange
                headers = {DELAY_TIER_HEADER: topology.delay_tier_for(wait)}
            # Middleware may stamp options (a correlation id) before enqueue: encode after them.
            self.emit_before("enqueue", message, wait)
            body = encode_message(message)
            check_size(message, body, self.config.max_message_bytes)
            self.outbound.check_body(message, body)
            # Fire-and-forget messages are transient and not waited for: the fastest publish there is.
            durable = topology.actor_profiles.get(message.actor_name) != "fire_and_forget"
            batch.append(
                Outgoing(
                    exchange, route.routing_key, body, message.message_id, headers, persistent=durable, confirm=durable
                )
            )
            sent.append((message, wait))
        self._publishing.publish(batch)
        for message, wait in sent:
            self.emit_after("enqueue", message, wait)
        return [message for message, _ in sent]

    def redelay(self, message: dramatiq.Message[Any], eta_ms: int) -> None:
        """Send a message that came back from a delay tier early to the next tier."""
        topology = self.topology
        tier = topology.delay_tier_for(eta_ms - current_millis())
        routing_key = route_of(message).routing_key
        body = encode_message(message)
        self._publishing.publish(
            [Outgoing(topology.delay_exchange, routing_key, body, message.message_id, {DELAY_TIER_HEADER: tier})]
        )

    def publish_event(
        self, topic: str, payload: Any, *, options: dict[str, Any] | None = None
    ) -> dramatiq.Message[Any]:
        """Publish a domain event; every actor subscribed to a matching pattern receives ``payload``.

        Raises:
            DefinitionError: The topic is not dot-separated words.
            Unroutable: No actor subscribes to the topic.
        """
        return self.enqueue(event_message(topic, payload, options))

    # -- consuming -----------------------------------------------------------------------------

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> dramatiq.broker.Consumer:
        try:
            self.ensure_topology()
        except BrokerUnavailable as e:
            raise dramatiq_error(ConnectionFailed, str(e)) from None  # one line, then Dramatiq retries
        self._window.capacity = max(1, self._workers.threads())
        consumer = GroupConsumer(self, queue_name, self.config.prefetch or prefetch, timeout, window=self._window)
        # Registered and given its queues at once, so an actor declared meanwhile is in one or the other.
        with self._consumers_lock:
            self._consumers.add(consumer)
            consumer.add_queues(self._actor_queues(queue_name), wake=False)
        try:
            consumer.subscribe_pending()
        except BaseException:
            consumer.close()  # Dramatiq never gets this consumer, so it would not close it
            raise
        return consumer

    def _actor_queues(self, queue_name: str, *, only: str | None = None) -> dict[str, tuple[str, Consumption]]:
        """The actor queues of Dramatiq queue ``queue_name`` (of actor ``only`` if given), each with its
        actor and how it is consumed."""
        # Actors first, then the topology: it holds at least these, whatever another thread declares.
        actors = list(self.actors.values())
        topology = self.topology
        # An ordered partition must not have a second message out while one is processed; a
        # long-running queue is read only into a free slot of the window (``polling``).
        how: dict[str, Consumption] = {"ordered": "one_at_a_time", "long_running": "long_running"}
        return {
            queue: (actor.actor_name, how.get(topology.actor_profiles[actor.actor_name], "prefetch"))
            for actor in actors
            if actor.queue_name == queue_name and only in (None, actor.actor_name)
            for queue in topology.consume_queues[actor.actor_name]
        }

    def unacked(self) -> dict[str, int]:
        """Per queue, the deliveries this process's consumers hold unacknowledged now (the heartbeat's)."""
        held: dict[str, int] = {}
        for consumer in self._running_consumers():
            for queue, count in consumer.settlements.unacked().items():
                held[queue] = held.get(queue, 0) + count
        return held

    def _running_consumers(self) -> list[GroupConsumer]:
        with self._consumers_lock:
            return list(self._consumers)

    def _wake_readers(self) -> None:
        """A slot of the long-running window was freed: every consumer reading long-running queues
        reads at once (whichever takes the slot first runs the next job)."""
        for consumer in self._running_consumers():
            if consumer.reader.queues:
                consumer.reader.wake()
                consumer.wake()

    def forget_consumer(self, consumer: dramatiq.broker.Consumer) -> None:
        """A closed consumer takes no more actors."""
        if isinstance(consumer, GroupConsumer):  # the only kind made here
            with self._consumers_lock:
                self._consumers.discard(consumer)

    def acknowledge_early(self, message: dramatiq.broker.MessageProxy) -> None:
        """Acknowledge a delivery now, before its actor ends (a long-running job owned by its lease)."""
        if isinstance(message, Delivery):
            message.consumer.acknowledge_early(message)

    # -- Dramatiq's connection and channel of each thread ------------------------------------------

    @property
    def connection(self) -> Any:
        """Dramatiq's connection of this thread, for code that uses it (this broker publishes and consumes
        on connections of its own, so nothing else replaces it): one that was closed is replaced."""
        current = getattr(self.state, "connection", None)
        if current is not None and not current.is_open:
            del self.connection
        return RabbitmqBroker.connection.fget(self)  # type: ignore[attr-defined]

    @connection.deleter
    def connection(self) -> None:
        RabbitmqBroker.connection.fdel(self)  # type: ignore[attr-defined]

    @property
    def channel(self) -> Any:
        """Dramatiq's channel of this thread, on :attr:`connection`; one that was closed is replaced."""
        current = getattr(self.state, "channel", None)
        if current is not None and not (current.is_open and current.connection.is_open):
            del self.channel
        return RabbitmqBroker.channel.fget(self)  # type: ignore[attr-defined]

    @channel.deleter
    def channel(self) -> None:
        RabbitmqBroker.channel.fdel(self)  # type: ignore[attr-defined]

    # -- dead letters (pipelines.dead_letters.reasons.DeadLetterAdmin) ---------------------------------

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Publish a message's body to ``queue``'s dead-letter queue with ``reason`` in its headers."""
        self._dead_letters.dead_letter(body, message_id=message_id, reason=reason, queue=queue)

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, left in place (``pipelines.broker.rabbitmq.dead_letters``)."""
        return self._dead_letters.peek_dead_letters(queue, limit)

    def remove_dead_letters(self, queue: str, remove: Callable[[RawDeadLetter], bool]) -> None:
        """Hand each dead letter of ``queue`` to ``remove``; those it returns True for leave the queue."""
        self._dead_letters.remove_dead_letters(queue, remove)

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; returns how many there were."""
        return self._dead_letters.purge_dead_letters(queue)

    def close(self) -> None:
        self.thread_connections.close()
        super().close()
