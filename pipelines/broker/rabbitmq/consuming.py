"""Consuming: one channel per Dramatiq queue name serves every actor queue of that group.

The group is open: an actor declared on the queue name after the worker started is added to the
running consumer (``add_queues`` from the declaring thread, subscribed by the consumer's own thread on
its next turn), as Dramatiq's own consumer reads whatever is sent to its queue name. A late
long-running actor's queues join the consumer's long-running window (``window``): subscribed only
while the window is open, else when it opens again.

Each delivery is screened before Dramatiq sees it (``pipelines.broker.screening``): one that is not a
message for the queue's actor (not JSON, fields missing, another actor's, over the size limit, an
option or header of the wrong type) is dead-lettered with the reason and never reaches a worker
thread. Nothing a producer publishes, and no fault in handling a delivery, raises out of ``__next__``
but a lost connection: such a delivery is dead-lettered (``could not be consumed``) instead of
restarting the consumer. A redelivered copy of a message dead-lettered already is acknowledged without
a second dead letter. A delayed message back from a delay tier before it is due goes on to the next
tier. Deliveries are settled by what the middleware decided (:mod:`pipelines.outcome`): a failed one is
published to its dead-letter queue with its reason and then acknowledged (``dead_lettering``), a
dropped one is acknowledged, and a retry in place goes back to the head of its queue.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import dramatiq
import pika
from dramatiq.common import current_millis
from dramatiq.errors import ConnectionClosed

from pipelines import options as opt
from pipelines import wire_options
from pipelines.broker.rabbitmq.confirms import CONNECTION_ERRORS
from pipelines.broker.rabbitmq.connections import dramatiq_error
from pipelines.broker.rabbitmq.dead_lettering import DeadLettering
from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.broker.rabbitmq.settling import Settlements
from pipelines.broker.rabbitmq.window import LongRunningWindow
from pipelines.broker.screening import letter_id, refusal, screen
from pipelines.dead_letters import DeadLetterReason, reason_for
from pipelines.errors import PipelinesError
from pipelines.outcome import outcome_of

if TYPE_CHECKING:
    from pipelines.broker.rabbitmq.broker import ExchangeBroker

logger = logging.getLogger(__name__)

#: AMQP reply code of a queue that does not exist.
NOT_FOUND = 404


class GroupConsumer(dramatiq.broker.Consumer):
    """Consumes every actor queue of one Dramatiq queue name on one channel (see the module docstring)."""

    def __init__(
        self, broker: ExchangeBroker, queue_name: str, prefetch: int, timeout_ms: int, *, window: LongRunningWindow
    ) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.prefetch = prefetch
        self.timeout_s = timeout_ms / 1000
        self.window = window
        self.queues: dict[str, str] = {}
        """The actor queues taken so far (queue → its actor)."""
        self._ready: deque[tuple[Any, Any, bytes]] = deque()
        self._actors_by_tag: dict[str, str] = {}
        self._queues_by_tag: dict[str, str] = {}
        self._pending: dict[str, tuple[str, bool]] = {}
        """Actor queues to start consuming (queue → its actor, one at a time?), added from any thread."""
        self._pending_lock = threading.Lock()
        self._long_queues: list[str] = []
        """The long-running queues taken so far (consumed while the window is open)."""
        self._long_tags: list[str] = []
        """The consumer tags of the long-running queues while their window is open."""
        self._stopped = False
        """Consumers cancelled for shutdown: a delivery rejected now is not delivered here again."""
        self._returning: list[Delivery] = []
        """Deliveries to return once the consumers are cancelled (see :meth:`requeue`)."""
        self._returning_lock = threading.Lock()
        self._cancelled: set[str] = set()
        self._lost: set[str] = set()
        """Queues whose consumer RabbitMQ cancelled (the queue was deleted, or its node is down)."""
        try:
            self.connection = pika.BlockingConnection(broker.thread_connections.candidates())
            self.channel = self.connection.channel()
        except CONNECTION_ERRORS as e:
            raise self._closed(e, str(broker.thread_connections.unavailable(e))) from None
        self.channel.add_on_cancel_callback(self._cancelled_by_broker)
        self.settlements = Settlements(connection=self.connection, channel=self.channel)
        self.dead_lettering = DeadLettering(broker=broker, settlements=self.settlements, window=window)

    def add_queues(self, queues: dict[str, str], one_at_a_time: set[str], *, wake: bool = True) -> None:
        """Consume these actor queues too (queue → actor), from the next ``__next__`` on; any thread may
        call this (an actor declared after the worker started): the consumer's own thread subscribes,
        woken from its wait for deliveries unless ``wake`` is false (it is the caller). Long-running
        queues are in ``window.queues`` before they are added here."""
        with self._pending_lock:
            self._pending |= {q: (a, q in one_at_a_time) for q, a in queues.items()}
        if not wake:
            return
        try:
            self.connection.add_callback_threadsafe(lambda: None)  # wake a consumer waiting for deliveries
        except CONNECTION_ERRORS:
            logger.debug("Consumer of %r is closed; its replacement consumes the new queues.", self.queue_name)

    def subscribe_pending(self) -> None:
        """Start consuming the queues added since the last call (in the consumer's own thread); a
        long-running one only while the window is open, else :meth:`_steer` does when it opens."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        pending = {q: entry for q, entry in pending.items() if q not in self.queues}
        if not pending or self._stopped:
            return
        try:
            self.broker.ensure_topology()  # a late actor's queues are declared before they are consumed
            # Open: consuming its long-running queues (or it has none yet) and a thread is free.
            window_open = (bool(self._long_tags) or not self._long_queues) and not self.window.full
            self.queues |= {q: actor for q, (actor, _) in pending.items()}
            self._long_queues = sorted({*self._long_queues, *(q for q in pending if q in self.window.queues)})
            # basic.qos applies to the consumers started after it on this channel, each on its own.
            for limit, single in ((self.prefetch, False), (1, True)):
                group = sorted(
                    q
                    for q, (_, one) in pending.items()
                    if one is single and (window_open or q not in self.window.queues)
                )
                if not group:
                    continue
                self.channel.basic_qos(prefetch_count=limit)
                for queue in group:
                    self._consume(queue)
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
        self.settlements.delivered(method.delivery_tag)  # before anything can settle it
        self._ready.append((method, properties, body))

    def _consume(self, queue: str) -> None:
        tag = self.channel.basic_consume(queue, self._on_delivery)
        self._actors_by_tag[tag] = self.queues[queue]
        self._queues_by_tag[tag] = queue
        if queue in self.window.queues:
            self._long_tags.append(tag)

    def _steer(self) -> None:
        """Open or close the long-running window by the threads free for it; stop consuming on shutdown
        (see :mod:`pipelines.broker.rabbitmq.window`)."""
        if self.window.stopping and not self._stopped:
            self._cancel(list(self._queues_by_tag))
            with self._returning_lock:
                self._stopped = True
                returning, self._returning = self._returning, []
            self._return(returning)
        elif self.window.full and self._long_tags:
            self._cancel(self._long_tags)
        elif self._long_queues and not self._long_tags and not self.window.full and not self._stopped:
            waiting = {method.consumer_tag for method, _, _ in self._ready}
            for tag in [t for t in self._cancelled if t not in waiting]:  # forget consumers cancelled before
                del self._queues_by_tag[tag], self._actors_by_tag[tag]
                self._cancelled.discard(tag)
            self.channel.basic_qos(prefetch_count=1)
            for queue in self._long_queues:
                self._consume(queue)

    def _cancel(self, tags: list[str]) -> None:
        for tag in tags:
            if tag not in self._cancelled:
                self._cancelled.add(tag)
                self.channel.basic_cancel(tag)
        self._long_tags.clear()

    def _cancelled_by_broker(self, *args: Any) -> None:
        """RabbitMQ's basic.cancel (pika passes the method frame last): nothing would be delivered from
        that queue again, so :meth:`__next__` starts over on a new consumer."""
        tag = args[-1].method.consumer_tag
        if tag not in self._cancelled:
            self._lost.add(self._queues_by_tag.get(tag, tag))

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
        """Wake ``__next__`` (from any thread), so that it steers the window at once."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            self.connection.add_callback_threadsafe(lambda: None)

    def __next__(self) -> dramatiq.broker.MessageProxy | None:
        self.subscribe_pending()
        try:
            self._steer()
            if not self._ready:
                self.connection.process_data_events(time_limit=self.timeout_s)
                self._steer()
        except CONNECTION_ERRORS as e:
            raise self._closed(e, str(e)) from None
        self._check_lost()
        if not self._ready:
            return None
        method, properties, body = self._ready.popleft()
        actor = self._actors_by_tag[method.consumer_tag]
        queue = self._queues_by_tag[method.consumer_tag]
        try:
            return self._take(method, properties, body, actor, queue)
        except ConnectionClosed:
            raise  # the connection is gone: Dramatiq's worker reconnects, RabbitMQ redelivers
        except Exception as e:  # a fault here must not restart the consumer and return every prefetched message
            logger.exception("Could not take a delivery on the queue of %r; dead-lettering it.", actor)
            reason = refusal(e, actor=actor, queue=queue, routing_key=method.routing_key)
            reason = replace(reason, reason="could not be consumed")
            self._refuse(method, properties, body, reason)
            return None

    def _take(self, method: Any, properties: Any, body: bytes, actor: str, queue: str) -> Delivery | None:
        """The delivery to hand to the worker, or None when it was settled here (put back, acknowledged as a
        copy of a dead letter, refused by screening, or sent on to its next delay tier)."""
        if not self.window.admits(queue):
            # No thread would run it now (or the worker stops): back to its queue rather than held here,
            # once the consumer that would take it again is cancelled.
            self._steer_or_close()
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
            self._refuse(method, properties, body, refusal(e, actor=actor, queue=queue, routing_key=method.routing_key))
            return None
        eta = wire_options.eta_ms(message.options)
        if eta is not None:
            if eta > current_millis():
                self._redelay(method, message, int(eta), queue, body)
                return None
            options = {k: v for k, v in message.options.items() if k != opt.ETA}
            message = dramatiq.Message(**{**message.asdict(), "options": options})
        delivery = Delivery(
            message,
            tag=method.delivery_tag,
            redelivered=method.redelivered,
            consumer=self,
            queue=queue,
            routing_key=method.routing_key,
            delivery_count=delivery_count,
            body=body,
        )
        delivery.counted = self.window.count(queue)
        if delivery.counted and self.window.full:
            self._steer_or_close()  # closed before the job starts, so its early acknowledgement takes nothing in
        return delivery

    def _steer_or_close(self) -> None:
        try:
            self._steer()
        except CONNECTION_ERRORS as e:
            raise self._closed(e, str(e)) from None

    def _refuse(self, method: Any, properties: Any, body: bytes, reason: DeadLetterReason) -> None:
        message_id = getattr(properties, "message_id", None) or letter_id(body)
        self.dead_lettering.refuse(method.delivery_tag, body, message_id, reason)

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
        """A long-running job ended: wake the consumer if a thread is free for the next one."""
        if isinstance(message, Delivery) and message.counted:
            message.counted = False
            if self.window.release():
                self.wake()

    def ack(self, message: dramatiq.broker.MessageProxy) -> None:
        self._release(message)
        if not self._owns(message):
            logger.debug("Not acking %s: its channel closed, RabbitMQ redelivers it.", message.message_id)
        elif outcome_of(message).requeue_in_place:
            # Back to the head of its queue (quorum queues redeliver returned messages first).
            self.settlements.reject(message.tag, requeue=True)
        elif not message.settled:
            self.settlements.ack(message.tag)

    def nack(self, message: dramatiq.broker.MessageProxy) -> None:
        self._release(message)
        # A delivery acknowledged on start needs no channel: only its dead letter is left to publish.
        if isinstance(message, Delivery) and (message.settled or message.consumer is self):
            self.dead_lettering.failed(message)
        else:
            logger.debug("Not rejecting %s: its channel closed, RabbitMQ redelivers it.", message.message_id)

    def requeue(self, messages: Iterable[dramatiq.broker.MessageProxy]) -> None:
        """Return deliveries never started to their queues (from any thread), once this consumer's
        consumers are cancelled: rejected earlier, RabbitMQ would deliver them here again at once."""
        owned = []
        for message in messages:
            self._release(message)
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
