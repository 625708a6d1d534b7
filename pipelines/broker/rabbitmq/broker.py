"""The RabbitMQ broker: Dramatiq's ``RabbitmqBroker``, its messages routed through exchanges.

This class is what Dramatiq and the middleware talk to; it composes the parts that do the work:
``connections`` (each thread's publishing connection), ``declaring`` (the namespace's topology),
``publishing`` (confirmed batches), ``consuming`` (with ``settling``) and ``dead_letters``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from queue import Empty
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import current_millis
from dramatiq.errors import BrokerConnectionError, ConnectionFailed

from pipelines import options as opt
from pipelines.broker.common import HookDispatch, TopologyCache, check_size, event_message, validate_actor
from pipelines.broker.rabbitmq.confirms import Outgoing
from pipelines.broker.rabbitmq.connections import Connections, dramatiq_error, node_parameters
from pipelines.broker.rabbitmq.consuming import GroupConsumer
from pipelines.broker.rabbitmq.dead_letters import RabbitDeadLetters
from pipelines.broker.rabbitmq.declaring import Declarer
from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.broker.rabbitmq.publishing import Publishing
from pipelines.broker.rabbitmq.screening import DeadLetterMarks
from pipelines.broker.rabbitmq.window import LongRunningWindow
from pipelines.broker.rabbitmq.workers import RunningWorkers
from pipelines.codec import encode_message, warn_custom_encoder
from pipelines.config import BrokerConfig
from pipelines.dead_letters import DeadLetterReason, RawDeadLetter
from pipelines.errors import BrokerAccessRefused, BrokerUnavailable, DefinitionError
from pipelines.naming import dead_letter_queue
from pipelines.outbound import Outbound
from pipelines.routing import route_of
from pipelines.store.roles import OnceMarks
from pipelines.topology import DELAY_TIER_HEADER, Topology

logger = logging.getLogger(__name__)


class ExchangeBroker(HookDispatch, RabbitmqBroker):
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
        """Prepares every message before it is encoded (see ``pipelines.outbound``)."""
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
        self._windows: dict[str, LongRunningWindow] = {}
        """Each Dramatiq queue name's long-running window; it outlives consumers that reconnect."""

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
                queues, one_at_a_time = self._actor_queues(actor.queue_name, only=actor.actor_name)
                self._window(actor.queue_name, queues)  # a late long-running actor joins the window
                for consumer in consumers:
                    consumer.add_queues(queues, one_at_a_time)
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
        elif signal == "worker_shutdown":
            self._workers.discard(args[0])
        super().emit_before(signal, *args, **kwargs)
        if signal == "worker_shutdown" and args:
            self._stop_consuming(args[0])

    def _stop_consuming(self, worker: dramatiq.Worker) -> None:
        """Before the worker stops its threads: take nothing more, and return what no thread started yet
        (Dramatiq stops its consumers only after the threads, while running jobs end)."""
        for window in self._windows.values():
            window.stopping = True
        with self._consumers_lock:
            consumers = list(self._consumers)
        for consumer in consumers:
            consumer.wake()
        while True:
            try:
                item = worker.work_queue.get_nowait()
            except Empty:
                return
            if isinstance(item.message, Delivery):
                item.message.consumer.requeue([item.message])
            worker.work_queue.task_done()

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
        """Delete every queue and exchange of this namespace (tests and decommissioning)."""
        self._declarer.delete(self.topology)

    # -- publishing ----------------------------------------------------------------------------

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        """Publish one message (``delay`` in milliseconds); see :meth:`enqueue_many`."""
        return self.enqueue_many([message], delay=delay)[0]

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
        self.ensure_topology()
        topology = self.topology
        sent: list[tuple[dramatiq.Message[Any], int | None]] = []
        batch: list[Outgoing] = []
        for prepared, wait in self.outbound.prepare(self.actors, messages, delay):
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
        with self._consumers_lock:
            window = self._window(queue_name, {})
        consumer = GroupConsumer(self, queue_name, self.config.prefetch or prefetch, timeout, window=window)
        # Registered and given its queues at once, so an actor declared meanwhile is in one or the other.
        with self._consumers_lock:
            self._consumers.add(consumer)
            queues, one_at_a_time = self._actor_queues(queue_name)
            self._window(queue_name, queues)  # its long-running queues are in the window before it takes them
            consumer.add_queues(queues, one_at_a_time, wake=False)
        try:
            consumer.subscribe_pending()
        except BaseException:
            consumer.close()  # Dramatiq never gets this consumer, so it would not close it
            raise
        return consumer

    def _actor_queues(self, queue_name: str, *, only: str | None = None) -> tuple[dict[str, str], set[str]]:
        """The actor queues of Dramatiq queue ``queue_name`` (queue → actor; of actor ``only`` if given)
        and those consumed one message at a time."""
        topology = self.topology
        queues = {
            queue: actor.actor_name
            for actor in self.actors.values()
            if actor.queue_name == queue_name and only in (None, actor.actor_name)
            for queue in topology.consume_queues[actor.actor_name]
        }
        # An ordered partition must not have a second message out while one is processed; a
        # long-running queue takes one delivery at a time, and none while no thread is free (``window``).
        one_at_a_time = {
            queue for queue, actor in queues.items() if topology.actor_profiles[actor] in ("ordered", "long_running")
        }
        return queues, one_at_a_time

    def _window(self, queue_name: str, queues: dict[str, str]) -> LongRunningWindow:
        """Queue name ``queue_name``'s long-running window, with the long-running ones of ``queues``
        (queue → actor) added; its capacity is the threads of the workers running here."""
        profiles = self.topology.actor_profiles
        window = self._windows.get(queue_name)
        if window is None:
            window = self._windows[queue_name] = LongRunningWindow(set(), capacity=1)
        window.capacity = max(1, self._workers.threads())
        window.add({queue for queue, actor in queues.items() if profiles[actor] == "long_running"})
        return window

    def forget_consumer(self, consumer: GroupConsumer) -> None:
        """A closed consumer takes no more actors."""
        with self._consumers_lock:
            self._consumers.discard(consumer)

    def acknowledge_early(self, message: dramatiq.broker.MessageProxy) -> None:
        """Acknowledge a delivery now, before its actor ends (a long-running job owned by its lease)."""
        if isinstance(message, Delivery):
            message.consumer.acknowledge_early(message)

    # -- dead letters (pipelines.dead_letters.DeadLetterAdmin) ---------------------------------

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Publish a message's body to ``queue``'s dead-letter queue with ``reason`` in its headers."""
        self._dead_letters.dead_letter(body, message_id=message_id, reason=reason, queue=queue)

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, left in place (read, then released unacknowledged)."""
        return self._dead_letters.peek_dead_letters(queue, limit)

    @contextlib.contextmanager
    def taking_dead_letter(self, queue: str, message_id: str) -> Iterator[RawDeadLetter | None]:
        """The dead letter ``message_id`` of ``queue``, removed from it if the block ends without error."""
        with self._dead_letters.taking_dead_letter(queue, message_id) as letter:
            yield letter

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; returns how many there were."""
        return self._dead_letters.purge_dead_letters(queue)

    # -- inspection and maintenance ------------------------------------------------------------

    def queue_depth(self, queue: str) -> int | None:
        """Messages ready in ``queue``, or None if it does not exist."""
        return self._declarer.depth(queue)

    def queue_consumers(self, queue: str) -> int | None:
        """Consumers reading ``queue`` now (in any process), or None if it does not exist."""
        return self._declarer.consumers(queue)

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

    def close(self) -> None:
        self.thread_connections.close()
        super().close()
