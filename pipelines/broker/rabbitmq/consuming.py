"""Consuming: one channel per Dramatiq queue name serves every actor queue of that group.

The group is open: an actor declared on the queue name after the worker started is added to the
running consumer (``add_queues`` from the declaring thread, subscribed by the consumer's own thread on
its next turn, which the declaration wakes), as Dramatiq's own consumer reads whatever is sent to its
queue name. Long-running queues are not subscribed to but read into the process's long-running
window (``polling``, ``window``), a late actor's as the others.

Each delivery is screened before Dramatiq sees it (``pipelines.broker.screening``): one that is not a
message for the queue's actor (not JSON, fields missing, another actor's, over the size limit, an
option or header of the wrong type) is dead-lettered with the reason and never reaches a worker
thread. Nothing a producer publishes, and no fault in handling a delivery, raises out of ``__next__``
but a lost connection: such a delivery is dead-lettered (``could not be consumed``) instead of
restarting the consumer, and a long-running one gives its slot of the window back. A redelivered copy
of a message dead-lettered already is acknowledged without a second dead letter. A delayed message
back from a delay tier before it is due goes on to the next tier. Deliveries are settled by what the
middleware decided (:mod:`pipelines.handling.outcome`): a failed one is published to its dead-letter queue
with its reason and then acknowledged (``dead_lettering``), a dropped one is acknowledged, and a retry
in place goes back to the head of its queue.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import dramatiq
from dramatiq.common import current_millis
from dramatiq.errors import ConnectionClosed

from pipelines import options as opt
from pipelines.broker.rabbitmq.confirms import CONNECTION_ERRORS
from pipelines.broker.rabbitmq.connecting import open_connection
from pipelines.broker.rabbitmq.connections import dramatiq_error
from pipelines.broker.rabbitmq.consumed_broker import ConsumedBroker
from pipelines.broker.rabbitmq.dead_lettering import DeadLettering
from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.broker.rabbitmq.polling import Fetched, LongRunningReader
from pipelines.broker.rabbitmq.settling import Settlements
from pipelines.broker.rabbitmq.window import LongRunningWindow
from pipelines.broker.screening import letter_id, screen, screened_out_reason
from pipelines.dead_letters.reasons import DeadLetterReason, reason_for
from pipelines.errors import PipelinesError
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.outcome import outcome_of
from pipelines.wire import option_values as wire_options

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

#: AMQP reply code of a queue that does not exist.
NOT_FOUND = 404

#: How an actor queue is consumed: with the consumer's prefetch, one delivery at a time (an ordered
#: partition), or read into the long-running window (``polling``).
Consumption = Literal["prefetch", "one_at_a_time", "long_running"]


class Arrival(NamedTuple):
    """A delivery received and not handed to the worker yet."""

    method: Any
    properties: Any
    body: bytes
    queue: str
    slot: bool
    """Fetched into a slot of the long-running window (given back if it never reaches a thread)."""


class GroupConsumer(dramatiq.broker.Consumer):
    """Consumes every actor queue of one Dramatiq queue name on one channel (see the module docstring)."""

    def __init__(
        self, broker: ConsumedBroker, queue_name: str, prefetch: int, timeout_ms: int, *, window: LongRunningWindow
    ) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.prefetch = prefetch
        self.timeout_s = timeout_ms / 1000
        self.window = window
        self.reader = LongRunningReader(window)
        """Reads the long-running queues of the group into the process's window."""
        self.queues: dict[str, str] = {}
        """The actor queues taken so far (queue → its actor)."""
        self._ready: deque[Arrival] = deque()
        self._queues_by_tag: dict[str, str] = {}
        self._pending: dict[str, tuple[str, Consumption]] = {}
        """Actor queues to start consuming (queue → its actor, how), added from any thread."""
        self._pending_lock = threading.Lock()
        self._stopped = False
        """Consumers cancelled for shutdown: a delivery rejected now is not delivered here again."""
        self._returning: list[Delivery] = []
        """Deliveries to return once the consumers are cancelled (see :meth:`requeue`)."""
        self._returning_lock = threading.Lock()
        self._readers_cancelled: list[str] = []
        """Readers subscriptions RabbitMQ cancelled (a readers queue deleted), announced again next turn."""
        self._lost: set[str] = set()
        """Actor queues whose consumer RabbitMQ cancelled (the queue was deleted, or its node is down)."""
        try:
            self.connection = open_connection(broker.thread_connections.candidates())
            self.channel = self.connection.channel()
            self.channel.add_on_cancel_callback(self._on_cancelled_by_broker)
        except CONNECTION_ERRORS as e:
            raise self._closed(e, str(broker.thread_connections.unavailable(e))) from None
        self.settlements = Settlements(connection=self.connection, channel=self.channel)
        self.dead_lettering = DeadLettering(broker=broker, settlements=self.settlements, window=window)

    def add_queues(self, queues: Mapping[str, tuple[str, Consumption]], *, wake: bool = True) -> None:
        """Consume these actor queues too (queue → its actor, how), from the next ``__next__`` on; any
        thread may call this (an actor declared after the worker started): the consumer's own thread
        subscribes, woken from its wait for deliveries unless ``wake`` is false (it is the caller)."""
        with self._pending_lock:
            self._pending |= queues
        if not wake:
            return
        try:
            self.connection.add_callback_threadsafe(lambda: None)  # wake a consumer waiting for deliveries
        except CONNECTION_ERRORS:
            logger.debug("Consumer of %r is closed; its replacement consumes the new queues.", self.queue_name)

    def subscribe_pending(self) -> None:
        """Start consuming the queues added since the last call (in the consumer's own thread)."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        pending = {q: entry for q, entry in pending.items() if q not in self.queues}
        if not pending or self._stopped:
            return
        try:
            self.broker.ensure_topology()  # a late actor's queues are declared before they are consumed
            self.queues |= {q: actor for q, (actor, _) in pending.items()}
            self.reader.add(self.channel, sorted(q for q, (_, how) in pending.items() if how == "long_running"))
            # basic.qos applies to the consumers started after it on this channel, each on its own.
            for limit, how in ((self.prefetch, "prefetch"), (1, "one_at_a_time")):
                group = sorted(q for q, (_, kind) in pending.items() if kind == how)
                if group:
                    self.channel.basic_qos(prefetch_count=limit)
                for queue in group:
                    self._queues_by_tag[self.channel.basic_consume(queue, self._on_delivery)] = queue
        except CONNECTION_ERRORS as e:
            raise self._closed(e, str(self.broker.thread_connections.unavailable(e))) from None
        except PipelinesError as e:
            raise dramatiq_error(ConnectionClosed, str(e)) from None

    def _closed(self, error: BaseException, text: str) -> ConnectionClosed:
        """Dramatiq's error for a lost consumer (its worker reconnects); after a 404 the topology is
        declared again first."""
        if getattr(error, "reply_code", None) == NOT_FOUND:
            self.broker.forget_declarations()
        return dramatiq_error(ConnectionClosed, text)

    def _on_delivery(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        queue = self._queues_by_tag[method.consumer_tag]
        self.settlements.delivered(method.delivery_tag, queue)  # before anything can settle it
        self._ready.append(Arrival(method, properties, body, queue, slot=False))

    def _on_cancelled_by_broker(self, method: Any) -> None:
        """RabbitMQ's basic.cancel: a readers subscription is announced again on the next turn; an actor
        queue would never deliver here again, so :meth:`__next__` starts over on a new consumer."""
        tag = method.method.consumer_tag
        if self.reader.announces(tag):
            self._readers_cancelled.append(tag)
        else:
            self._lost.add(self._queues_by_tag.get(tag, tag))

    def _read_long_running(self) -> None:
        """Fetch long-running messages into free slots of the window, if a read is due; announce again
        the readers subscriptions RabbitMQ cancelled."""
        while self._readers_cancelled:
            self.reader.announce_again(self.channel, self._readers_cancelled.pop())
        if not self._stopped:
            self.reader.read(self.channel, self._on_fetched)

    def _on_fetched(self, fetched: Fetched) -> None:
        self.settlements.delivered(fetched.method.delivery_tag, fetched.queue)
        self._ready.append(Arrival(fetched.method, fetched.properties, fetched.body, fetched.queue, slot=True))

    def _stop_if_stopping(self) -> None:
        """On shutdown, stop consuming and return what was waiting to be started (see ``window``)."""
        if self.window.stopping and not self._stopped:
            for tag in self._queues_by_tag:
                self.channel.basic_cancel(tag)
            with self._returning_lock:
                self._stopped = True
                returning, self._returning = self._returning, []
            self._return(returning)

    def _check_lost(self) -> None:
        """Give up this consumer when RabbitMQ cancelled one of its queues: Dramatiq's worker opens a
        new one, which declares the topology again (a deleted queue comes back) and consumes it all."""
        if self._lost and not self._stopped:
            self.broker.forget_declarations()
            raise dramatiq_error(
                ConnectionClosed,
                f"RabbitMQ cancelled the consumer of {', '.join(sorted(self._lost))} (the queue was deleted, "
                "or its node is down); the worker declares it again and consumes anew.",
            )

    def wake(self) -> None:
        """Wake ``__next__`` (from any thread), so that it reads or stops at once."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            self.connection.add_callback_threadsafe(lambda: None)

    def __next__(self) -> dramatiq.broker.MessageProxy | None:
        self.subscribe_pending()
        try:
            self._stop_if_stopping()
            self._read_long_running()
            if not self._ready:
                self.connection.process_data_events(time_limit=self.reader.wait_s(self.timeout_s))
                self._stop_if_stopping()
                self._read_long_running()
        except CONNECTION_ERRORS as e:
            raise self._closed(e, str(e)) from None
        self._check_lost()
        if not self._ready:
            return None
        arrival = self._ready.popleft()
        delivery = None
        try:
            delivery = self._take(arrival)
        finally:
            if arrival.slot:
                if delivery is None:
                    self.window.release()  # it never reaches a thread: its slot is free again
                else:
                    delivery.counted = True
        return delivery

    def _take(self, arrival: Arrival) -> Delivery | None:
        """What goes to the worker of ``arrival``, or None if it was settled here; a fault in handling it
        dead-letters it, only a lost connection raises (Dramatiq's worker reconnects, RabbitMQ redelivers)."""
        actor = self.queues[arrival.queue]
        try:
            return self._delivery(arrival, actor)
        except ConnectionClosed:
            raise
        except Exception as e:  # a fault here must not restart the consumer and return every prefetched message
            logger.exception("Could not take a delivery on the queue of %r; dead-lettering it.", actor)
            reason = screened_out_reason(e, actor=actor, queue=arrival.queue, routing_key=arrival.method.routing_key)
            self._dead_letter_body(arrival, replace(reason, reason="could not be consumed"))
            return None

    def _delivery(self, arrival: Arrival, actor: str) -> Delivery | None:
        """What goes to the worker of ``arrival``, or None if it was settled here (see the module docstring)."""
        method, properties, body, queue, _ = arrival
        if self.window.stopping:
            # The worker stops: back to its queue rather than held here (nothing is consumed any more).
            self.settlements.reject(method.delivery_tag, requeue=True)
            return None
        if method.redelivered and self.broker.dead_letter_marks.seen(queue, body):
            # Dead-lettered already; its acknowledgement was lost with a channel.
            logger.info("Acknowledging a redelivered copy of a message dead-lettered already (queue %s).", queue)
            self.settlements.ack(method.delivery_tag)
            return None
        try:
            message, delivery_count = screen(
                body,
                getattr(properties, "headers", None),
                actor=actor,
                queue_name=self.queue_name,
                max_bytes=self.broker.config.max_message_bytes,
                actors=self.broker.actors,
            )
        except Exception as e:  # whatever a producer sent, it must not reach Dramatiq's consumer loop
            logger.error("Dead-lettering a message on the queue of %r: %s: %s.", actor, type(e).__name__, e)
            self._dead_letter_body(
                arrival, screened_out_reason(e, actor=actor, queue=queue, routing_key=method.routing_key)
            )
            return None
        eta = wire_options.eta_ms(message.options)
        if eta is not None:
            if eta > current_millis():
                self._redelay(method, message, int(eta), queue, body)
                return None
            options = {k: v for k, v in message.options.items() if k != opt.ETA}
            message = dramatiq.Message(**{**message.asdict(), "options": options})
        return Delivery(
            message,
            tag=method.delivery_tag,
            redelivered=method.redelivered,
            consumer=self,
            queue=queue,
            routing_key=method.routing_key,
            delivery_count=delivery_count,
            body=body,
        )

    def _dead_letter_body(self, arrival: Arrival, reason: DeadLetterReason) -> None:
        message_id = getattr(arrival.properties, "message_id", None) or letter_id(arrival.body)
        self.dead_lettering.dead_letter_body(arrival.method.delivery_tag, arrival.body, message_id, reason)

    def _redelay(self, method: Any, message: dramatiq.Message[Any], eta: int, queue: str, body: bytes) -> None:
        """Back from a delay tier before it is due: on to the next tier, then let go of it here (if that
        publish fails, it is dead-lettered with the reason rather than lost or retried in a loop)."""
        try:
            self.broker.redelay(message, eta)
        except Exception as e:  # on the consumer's thread: whatever failed, this delivery ends here
            logger.exception("Could not send %s on to its next delay tier; dead-lettering it.", message.message_id)
            reason = reason_for(message, reason="could not be delayed", exception=e, queue=queue)
            home = self.dead_lettering.home(message.actor_name)
            self.dead_lettering.publish(method.delivery_tag, body, message.message_id, reason, home, received=body)
            return
        self.settlements.ack(method.delivery_tag)

    def _owns(self, message: dramatiq.broker.MessageProxy) -> bool:
        return isinstance(message, Delivery) and message.consumer is self

    def acknowledge_early(self, message: Delivery) -> None:
        """Acknowledge a delivery before its actor ends; its later ack or nack sends nothing."""
        if not message.settled:
            message.settled = True
            self.settlements.ack(message.tag)

    def _release(self, message: dramatiq.broker.MessageProxy) -> None:
        """A long-running job ended (or never started): its slot of the window is free again."""
        if isinstance(message, Delivery) and message.counted:
            message.counted = False
            self.window.release()

    def ack(self, message: dramatiq.broker.MessageProxy) -> None:
        self._release(message)
        if isinstance(message, LocalDelivery):
            return  # nothing of it is in RabbitMQ
        if not self._owns(message):
            logger.debug("Not acking %s: its channel closed, RabbitMQ redelivers it.", message.message_id)
        elif outcome_of(message).settlement.requeue_in_place:
            # Back to the head of its queue (quorum queues redeliver returned messages first).
            self.settlements.reject(message.tag, requeue=True)
        elif not message.settled:
            self.settlements.ack(message.tag)

    def nack(self, message: dramatiq.broker.MessageProxy) -> None:
        self._release(message)
        # A delivery acknowledged on start needs no channel: only its dead letter is left to publish.
        if isinstance(message, LocalDelivery):
            self.dead_lettering.failed_local(message)
        elif isinstance(message, Delivery) and (message.settled or message.consumer is self):
            self.dead_lettering.failed(message)
        else:
            logger.debug("Not rejecting %s: its channel closed, RabbitMQ redelivers it.", message.message_id)

    def requeue(self, messages: Iterable[dramatiq.broker.MessageProxy]) -> None:
        """Return deliveries never started to their queues (from any thread), once this consumer's
        consumers are cancelled: rejected earlier, RabbitMQ would deliver them here again at once."""
        owned = []
        for message in messages:
            self._release(message)
            if isinstance(message, LocalDelivery):
                message.hand_back(self.broker)
                continue
            if self._owns(message) and isinstance(message, Delivery) and not message.settled:
                owned.append(message)
        with self._returning_lock:
            if not self._stopped:
                self._returning.extend(owned)
                owned = []
        self._return(owned)
        self.wake()

    def _return(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            if not delivery.settled:
                delivery.settled = True
                self.settlements.reject(delivery.tag, requeue=True)

    def close(self) -> None:
        self.broker.forget_consumer(self)
        # Fetched and never handed to the worker: RabbitMQ takes them back with the channel; their slots
        # of the window are free again.
        while self._ready:
            if self._ready.popleft().slot:
                self.window.release()
        try:
            done = threading.Event()
            self.connection.add_callback_threadsafe(done.set)
            deadline = time.monotonic() + 5
            while not done.is_set() and time.monotonic() < deadline:
                self.connection.process_data_events(time_limit=0.1)
            self.channel.close()
            self.connection.close()
        except CONNECTION_ERRORS:
            pass
