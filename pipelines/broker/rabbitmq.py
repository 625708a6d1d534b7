"""The RabbitMQ broker: Dramatiq's ``RabbitmqBroker`` connected through exchanges.

Dramatiq publishes to one queue per Dramatiq queue name on the default exchange. This subclass keeps
Dramatiq's actors, middleware and worker, and changes where messages go (see ``pipelines.topology``):
one queue per actor, bound to the namespace's work exchange by the actor's name, so one publish can
reach several actors (a fan-out) and an event reaches every subscriber. A Dramatiq queue name becomes
the group of actor queues one consumer thread serves, so ``dramatiq actors --queues reports`` still
means what it says. Delays wait in tiered delay queues in RabbitMQ, never in a worker's memory.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import dramatiq
import orjson
import pika
import pika.exceptions
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import current_millis
from dramatiq.errors import BrokerConnectionError, ConnectionClosed, ConnectionFailed

from pipelines import naming
from pipelines import options as opt
from pipelines.broker.common import (
    HookDispatch,
    TopologyCache,
    check_size,
    event_message,
    validate_actor,
)
from pipelines.broker.publisher import (
    CONNECTION_ERRORS,
    REFUSED_LOGIN,
    BatchInterrupted,
    ConfirmPublisher,
    Outgoing,
    Refused,
)
from pipelines.codec import MalformedMessage, decode_message, encode_message
from pipelines.config import BrokerConfig, mask_url
from pipelines.dead_letters import DeadLetterReason, RawDeadLetter, now_iso, reason_for
from pipelines.delivery import UnresolvableMessage, resolve
from pipelines.errors import (
    BrokerAccessRefused,
    BrokerUnavailable,
    DefinitionError,
    MessageTooLarge,
    PipelinesError,
    PublishError,
    QueueFull,
    TopologyMismatch,
    Unroutable,
)
from pipelines.outbound import Outbound
from pipelines.outcome import outcome_of
from pipelines.routing import route_of, topic_matches
from pipelines.topology import DELAY_TIER_HEADER, Topology

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

#: How many times a publish is retried on a fresh connection before BrokerUnavailable.
MAX_PUBLISH_ATTEMPTS = 3
#: AMQP reply code of a declaration that contradicts what exists.
PRECONDITION_FAILED = 406
#: How many times declarations are retried on a fresh connection.
MAX_DECLARE_ATTEMPTS = 2
#: Longest message id taken from a body for a dead letter that came without one.
MAX_LETTER_ID_CHARS = 200


class ExchangeBroker(HookDispatch, RabbitmqBroker):
    """RabbitMQ broker that routes through the namespace's exchanges (see the module docstring)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        namespace: str,
        outbound: Outbound,
        middleware: list[dramatiq.Middleware] | None = None,
    ) -> None:
        super().__init__(url=config.url, confirm_delivery=config.confirm_delivery, middleware=middleware)
        self.config = config
        self.namespace = namespace
        self.outbound = outbound
        parameters: Any = self.parameters
        parameters.heartbeat = config.heartbeat_s
        parameters.connection_attempts = config.connection_attempts
        parameters.retry_delay = config.retry_delay_s
        parameters.blocked_connection_timeout = config.blocked_connection_timeout_s
        if config.url.startswith("amqps://") and (config.tls.ca_file or config.tls.cert_file):
            parameters.ssl_options = _ssl_options(config)
        self.actor_options |= {opt.SUBSCRIBE}
        self.publish_count = 0
        self._topology = TopologyCache(namespace=namespace, config=config)
        self._local = threading.local()
        self._publishers: set[ConfirmPublisher] = set()
        self._declare_lock = threading.Lock()
        self._declared: set[str] = set()

    # -- declaration ---------------------------------------------------------------------------

    def declare_actor(self, actor: dramatiq.Actor[Any, Any]) -> None:
        validate_actor(actor, namespace=self.namespace)
        super().declare_actor(actor)

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
        super().emit_before(signal, *args, **kwargs)

    def _check_access(self) -> None:
        """A worker whose login RabbitMQ refuses stops at boot with the reason (the ``dramatiq`` CLI
        exits with status 3); one that cannot reach RabbitMQ yet starts, and its consumers keep trying."""
        try:
            self.ensure_topology()
        except BrokerAccessRefused as e:
            raise BrokerConnectionError(str(e)) from None  # type: ignore[no-untyped-call]
        except BrokerUnavailable as e:
            logger.warning("%s The worker keeps trying.", e)

    def ensure_topology(self) -> None:
        """Declare whatever of the topology this broker has not declared yet (idempotent)."""
        topology = self.topology
        wanted = {e.name for e in topology.exchanges} | {q.name for q in topology.queues}
        if wanted <= self._declared:
            return
        with self._declare_lock:
            for attempt in range(1, MAX_DECLARE_ATTEMPTS + 1):
                try:
                    self._declare(topology)
                except pika.exceptions.ChannelClosedByBroker as e:
                    if e.reply_code != PRECONDITION_FAILED:
                        raise self._unavailable(e) from None
                    raise TopologyMismatch(
                        f"RabbitMQ refuses to declare part of namespace {self.namespace!r}: {e.reply_text}. It "
                        "exists with other arguments: an actor's profile or [broker] queue_type changed since. "
                        "Drain and delete the old queue (rabbitmqctl delete_queue NAME), or restore the setting."
                    ) from None
                except CONNECTION_ERRORS as e:
                    self._drop_publisher()
                    if attempt == MAX_DECLARE_ATTEMPTS:
                        raise self._unavailable(e) from None
                else:
                    self._declared |= wanted
                    return

    def _declare(self, topology: Topology) -> None:
        channel = self._alive_publisher().declare_channel
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

    def forget_declarations(self) -> None:
        """Make the next publish or consume declare everything again (after a 404 or a return)."""
        self._declared.clear()

    # -- publishing ----------------------------------------------------------------------------

    def _publisher(self) -> ConfirmPublisher:
        publisher: ConfirmPublisher | None = getattr(self._local, "publisher", None)
        if publisher is None or not publisher.connection.is_open:
            try:
                publisher = ConfirmPublisher(self.parameters, confirm=self.config.confirm_delivery)
            except CONNECTION_ERRORS as e:
                raise self._unavailable(e) from None
            self._local.publisher = publisher
            self._publishers.add(publisher)
        return publisher

    def _alive_publisher(self) -> ConfirmPublisher:
        """This thread's publisher, on a connection checked to be open (an idle one may have been
        closed by the server for missed heartbeats; checking also answers pending heartbeats)."""
        for attempt in range(1, MAX_DECLARE_ATTEMPTS + 1):
            publisher = self._publisher()
            try:
                publisher.connection.process_data_events(time_limit=0)
            except CONNECTION_ERRORS as e:
                self._drop_publisher()
                if attempt == MAX_DECLARE_ATTEMPTS:
                    raise self._unavailable(e) from None
                continue
            return publisher
        raise AssertionError("unreachable")

    def _on_channel(self, operation: Callable[[Any], _T]) -> _T:
        """Run a declaration or inspection on a live channel, reconnecting once if the connection died."""
        return operation(self._alive_publisher().declare_channel)

    def _drop_publisher(self) -> None:
        publisher: ConfirmPublisher | None = getattr(self._local, "publisher", None)
        if publisher is not None:
            self._local.publisher = None
            self._publishers.discard(publisher)
            publisher.close()

    def _unavailable(self, error: BaseException) -> BrokerUnavailable:
        where = f"RabbitMQ at {mask_url(self.config.url)}"
        cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if isinstance(error, REFUSED_LOGIN):
            return BrokerAccessRefused(
                f"{where} refused the connection ({cause}). Check the user name, "
                "password and virtual host in broker.url (or PIPELINES_BROKER__URL), and the user's permissions."
            )
        return BrokerUnavailable(
            f"{where} does not answer ({cause}). "
            "Is it running? Try `docker compose up -d rabbitmq`, or set broker.url in config.toml."
        )

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
        self._publish(batch)
        for message, wait in sent:
            self.emit_after("enqueue", message, wait)
        return [message for message, _ in sent]

    def redelay(self, message: dramatiq.Message[Any], eta_ms: int) -> None:
        """Send a message that came back from a delay tier early to the next tier."""
        topology = self.topology
        tier = topology.delay_tier_for(eta_ms - current_millis())
        body = encode_message(message)
        self._publish(
            [
                Outgoing(
                    topology.delay_exchange,
                    route_of(message).routing_key,
                    body,
                    message.message_id,
                    {DELAY_TIER_HEADER: tier},
                )
            ]
        )

    def _publish(self, batch: list[Outgoing]) -> None:
        remaining = batch
        redeclared = False
        for attempt in range(1, MAX_PUBLISH_ATTEMPTS + 1):
            try:
                returned = self._publisher().publish(remaining)
            except Refused as e:
                raise self._refusal(e) from None
            except BatchInterrupted as e:
                self._drop_publisher()
                remaining = [item for i, item in enumerate(remaining) if i not in e.confirmed]
                if attempt == MAX_PUBLISH_ATTEMPTS:
                    raise self._unavailable(e.cause) from None
                logger.warning("Publish interrupted (%s); retrying %d message(s).", e.cause, len(remaining))
                continue
            self.publish_count += len(remaining)
            if not returned:
                return
            # A queue may have been deleted under us: declare again and resend what came back.
            remaining = [item for item in remaining if item.message_id in returned]
            if redeclared or attempt == MAX_PUBLISH_ATTEMPTS:
                keys = sorted({item.routing_key for item in remaining})
                raise Unroutable(
                    f"No queue in namespace {self.namespace!r} is bound for {', '.join(keys)}: no declared actor "
                    "has that name, or no actor subscribes to that topic."
                )
            self.forget_declarations()
            self.ensure_topology()
            redeclared = True

    def _refusal(self, refused: Refused) -> PublishError:
        """QueueFull naming the full queue a refused publish was bound for, else the refusal itself."""
        topology = self.topology
        limits = {q.name: q.arguments["x-max-length"] for q in topology.queues if "x-max-length" in q.arguments}
        for item in refused.items:
            bound = {
                b.queue
                for b in topology.bindings
                if b.exchange == item.exchange and b.queue in limits and topic_matches(b.routing_key, item.routing_key)
            }
            for queue in sorted(bound):
                depth = self.queue_depth(queue) or 0
                if depth >= limits[queue]:
                    return QueueFull(
                        f"Queue {queue} is full ({depth} messages, max_length {limits[queue]}): RabbitMQ refused "
                        f"message {item.message_id}. Add workers, slow the producer down, or raise max_length "
                        "(the actor's option, or [broker] max_queue_length).",
                        queue=queue,
                        depth=depth,
                    )
        return refused

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Publish a message's body to ``queue``'s dead-letter queue with ``reason`` in its headers."""
        exchange = naming.dead_letter_exchange(self.namespace)
        self._publish([Outgoing(exchange, queue, body, message_id, reason.to_headers())])

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
            raise ConnectionFailed(str(e)) from None  # type: ignore[no-untyped-call]  # one line, then a retry
        topology = self.topology
        queues = {
            queue: actor.actor_name
            for actor in self.actors.values()
            if actor.queue_name == queue_name
            for queue in topology.consume_queues[actor.actor_name]
        }
        # An ordered partition must not have a second message out while one is processed; a
        # long-running job is acknowledged on start, so one at a time keeps a worker from hoarding.
        one_at_a_time = {
            queue for queue, actor in queues.items() if topology.actor_profiles[actor] in ("ordered", "long_running")
        }
        return _GroupConsumer(
            self, queue_name, queues, self.config.prefetch or prefetch, timeout, one_at_a_time=one_at_a_time
        )

    def acknowledge_early(self, message: dramatiq.broker.MessageProxy) -> None:
        """Acknowledge a delivery now, before its actor ends (a long-running job owned by its lease)."""
        if isinstance(message, _Delivery):
            message.consumer.acknowledge_early(message)

    # -- inspection and maintenance ------------------------------------------------------------

    def queue_depth(self, queue: str) -> int | None:
        """Messages ready in ``queue``, or None if it does not exist."""
        try:
            return self._on_channel(
                lambda channel: int(channel.queue_declare(queue, passive=True).method.message_count)
            )
        except pika.exceptions.ChannelClosedByBroker:
            return None

    def get_queue_message_counts(self, queue_name: str) -> tuple[int, int, int]:
        """(ready, delayed, dead) messages of the actors in Dramatiq queue ``queue_name``."""
        topology = self.topology
        actors = [a for a in topology.actor_queues if self.actors[a].queue_name == queue_name]
        ready = sum(self.queue_depth(q) or 0 for a in actors for q in topology.consume_queues[a])
        dead = sum(self.queue_depth(naming.dead_letter_queue(topology.actor_queues[a])) or 0 for a in actors)
        return ready, 0, dead

    def flush(self, queue_name: str) -> None:
        topology = self.topology
        for actor, queue in topology.actor_queues.items():
            if self.actors[actor].queue_name == queue_name:
                for name in (*topology.consume_queues[actor], naming.dead_letter_queue(queue)):
                    self._purge(name)

    def flush_all(self) -> None:
        for queue in self.topology.queues:
            self._purge(queue.name)

    def _purge(self, queue: str) -> None:
        with contextlib.suppress(pika.exceptions.ChannelClosedByBroker):
            self._on_channel(lambda channel: channel.queue_purge(queue))

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, left in place (read, then released unacknowledged)."""
        channel = self._alive_publisher().connection.channel()
        letters: list[RawDeadLetter] = []
        try:
            while len(letters) < limit:
                method, properties, body = channel.basic_get(queue, auto_ack=False)
                if method is None:
                    break
                letters.append(RawDeadLetter(queue, body, properties.headers or {}, properties.message_id or ""))
        except pika.exceptions.ChannelClosedByBroker:
            return letters  # no such queue (yet)
        finally:
            if channel.is_open:
                channel.close()
        return letters

    @contextlib.contextmanager
    def taking_dead_letter(self, queue: str, message_id: str) -> Iterator[RawDeadLetter | None]:
        """The dead letter ``message_id`` of ``queue``, removed from it if the block ends without error."""
        channel = self._alive_publisher().connection.channel()
        found: tuple[int, RawDeadLetter] | None = None
        try:
            while found is None:
                method, properties, body = channel.basic_get(queue, auto_ack=False)
                if method is None:
                    break
                if properties.message_id == message_id:
                    letter = RawDeadLetter(queue, body, properties.headers or {}, message_id)
                    found = (method.delivery_tag, letter)
            yield found[1] if found else None
            if found:
                channel.basic_ack(found[0])
        finally:
            # Everything else read on the way is released back to the queue.
            if channel.is_open:
                channel.close()

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every message of ``queue``; returns how many there were."""
        try:
            return self._on_channel(lambda channel: int(channel.queue_purge(queue).method.message_count))
        except pika.exceptions.ChannelClosedByBroker:
            return 0

    def delete_topology(self) -> None:
        """Delete every queue and exchange of this namespace (tests and decommissioning)."""
        topology = self.topology
        channel = self._alive_publisher().declare_channel
        for queue in topology.queues:
            channel.queue_delete(queue.name)
        for exchange in topology.exchanges:
            channel.exchange_delete(exchange.name)
        self.forget_declarations()

    def close(self) -> None:
        for publisher in list(self._publishers):
            publisher.close()
        self._publishers.clear()
        super().close()


def _ssl_options(config: BrokerConfig) -> pika.SSLOptions:
    import ssl

    context = ssl.create_default_context(cafile=str(config.tls.ca_file) if config.tls.ca_file else None)
    if config.tls.cert_file:
        context.load_cert_chain(str(config.tls.cert_file), str(config.tls.key_file) if config.tls.key_file else None)
    return pika.SSLOptions(context, server_hostname=config.tls.server_hostname)


class _Delivery(dramatiq.broker.MessageProxy):
    """A message as one consumer received it: its delivery tag is only valid on that consumer's channel."""

    def __init__(
        self,
        message: dramatiq.Message[Any],
        *,
        tag: int,
        redelivered: bool,
        consumer: _GroupConsumer,
        queue: str,
        routing_key: str,
        delivery_count: int,
    ) -> None:
        super().__init__(message)
        self.tag = tag
        self.redelivered = redelivered
        self.consumer = consumer
        self.queue = queue
        self.routing_key = routing_key
        outcome = outcome_of(self)
        outcome.queue = queue
        outcome.delivery_count = delivery_count
        self.settled = False
        """Acknowledged already (a long-running job, on start): later settlements send nothing."""


def _letter_id(body: bytes) -> str:
    """An id for a dead letter published without one: the body's ``message_id`` if it has a usable
    one, else a new one (so that ``dlq show``/``replay``/``purge`` can name every letter)."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        decoded = None
    found = decoded.get("message_id") if isinstance(decoded, dict) else None
    if isinstance(found, str) and 0 < len(found) <= MAX_LETTER_ID_CHARS and found.isprintable():
        return found
    return f"unnamed-{uuid.uuid4().hex}"


class _GroupConsumer(dramatiq.broker.Consumer):
    """Consumes every actor queue of one Dramatiq queue name on one channel."""

    def __init__(
        self,
        broker: ExchangeBroker,
        queue_name: str,
        queues: dict[str, str],
        prefetch: int,
        timeout_ms: int,
        *,
        one_at_a_time: set[str],
    ) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.timeout_s = timeout_ms / 1000
        self._ready: deque[tuple[Any, Any, bytes]] = deque()
        self._settlements: deque[tuple[int, bool | None]] = deque()  # (tag, None to ack | requeue)
        self._flush_scheduled = False
        self._actors_by_tag: dict[str, str] = {}
        self._queues_by_tag: dict[str, str] = {}
        try:
            self.connection = pika.BlockingConnection(broker.parameters)
            self.channel = self.connection.channel()
            # basic.qos applies to the consumers started after it on this channel, each on its own.
            for limit, group in ((prefetch, queues.keys() - one_at_a_time), (1, queues.keys() & one_at_a_time)):
                if not group:
                    continue
                self.channel.basic_qos(prefetch_count=limit)
                for queue in sorted(group):
                    tag = self.channel.basic_consume(queue, self._on_delivery)
                    self._actors_by_tag[tag] = queues[queue]
                    self._queues_by_tag[tag] = queue
        except CONNECTION_ERRORS as e:
            if getattr(e, "reply_code", None) == 404:
                broker.forget_declarations()
            raise ConnectionClosed(str(broker._unavailable(e))) from None  # type: ignore[no-untyped-call]

    def _on_delivery(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self._ready.append((method, properties, body))

    def __next__(self) -> dramatiq.broker.MessageProxy | None:
        try:
            if not self._ready:
                self.connection.process_data_events(time_limit=self.timeout_s)
        except CONNECTION_ERRORS as e:
            if getattr(e, "reply_code", None) == 404:
                self.broker.forget_declarations()
            raise ConnectionClosed(e) from None  # type: ignore[no-untyped-call]
        if not self._ready:
            return None
        method, properties, body = self._ready.popleft()
        actor = self._actors_by_tag[method.consumer_tag]
        queue = self._queues_by_tag[method.consumer_tag]
        try:
            message = self._message_from(body, actor)
        except (MalformedMessage, UnresolvableMessage, MessageTooLarge) as e:
            logger.error("Dead-lettering a message on the queue of %r: %s.", actor, e)
            reason = DeadLetterReason(
                reason="malformed message" if not isinstance(e, MessageTooLarge) else "message too large",
                error_type=type(e).__name__,
                error=str(e),
                actor=actor,
                queue=queue,
                routing_key=method.routing_key,
                at=now_iso(),
            )
            message_id = getattr(properties, "message_id", None) or _letter_id(body)
            self._dead_letter(method.delivery_tag, body, message_id, reason, self._home(actor))
            return None
        eta = message.options.get(opt.ETA)
        if eta is not None:
            options = {k: v for k, v in message.options.items() if k != opt.ETA}
            if isinstance(eta, int | float) and eta > current_millis():
                # Back from a delay tier before it is due: on to the next tier, then let go of it here.
                self.broker.redelay(message, int(eta))
                self._ack(method.delivery_tag)
                return None
            message = dramatiq.Message(**{**message.asdict(), "options": options})
        headers = getattr(properties, "headers", None) or {}
        return _Delivery(
            message,
            tag=method.delivery_tag,
            redelivered=method.redelivered,
            consumer=self,
            queue=queue,
            routing_key=method.routing_key,
            delivery_count=int(headers.get("x-delivery-count", 0)),
        )

    def _message_from(self, body: bytes, actor: str) -> dramatiq.Message[Any]:
        """The message ``actor`` runs for this body (raises what makes it a dead letter)."""
        if len(body) > self.broker.config.max_message_bytes:
            raise MessageTooLarge(f"body is {len(body)} bytes, over broker.max_message_bytes")
        return resolve(decode_message(body), actor_name=actor, queue_name=self.queue_name)

    def _dead_letter(self, tag: int, body: bytes, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Publish to the dead-letter exchange with the reason, then acknowledge; if that publish fails,
        reject instead, so RabbitMQ dead-letters it (without our reason) and nothing is lost."""
        try:
            self.broker.dead_letter(body, message_id=message_id, reason=reason, queue=queue)
        except PipelinesError:
            logger.exception("Could not dead-letter %s with its reason; rejecting it instead.", message_id)
            self._reject(tag, requeue=False)
            return
        self._ack(tag)

    def _ack(self, tag: int) -> None:
        self._settle(tag, None)

    def _reject(self, tag: int, *, requeue: bool) -> None:
        self._settle(tag, requeue)

    def _settle(self, tag: int, requeue: bool | None) -> None:
        """Queue an ack (``requeue`` None) or a nack for the consumer thread; wake it once per batch.

        Worker threads finish messages concurrently; each wake-up of the connection's loop is a lock
        and a syscall, so settlements gather in a queue and one callback sends all of them.
        """
        self._settlements.append((tag, requeue))
        if self._flush_scheduled:
            return
        self._flush_scheduled = True
        try:
            self.connection.add_callback_threadsafe(self._flush_settlements)
        except CONNECTION_ERRORS as e:
            raise ConnectionClosed(e) from None  # type: ignore[no-untyped-call]

    def _flush_settlements(self) -> None:
        # Cleared before draining: a settlement queued meanwhile schedules the next flush.
        self._flush_scheduled = False
        # pika's blocking channel writes to the socket after every ack; the channel it wraps only
        # queues the frame. All but the last go through the latter, and the last one's blocking call
        # writes the whole batch.
        while self._settlements:
            tag, requeue = self._settlements.popleft()
            channel = self.channel if not self._settlements else self.channel._impl
            if requeue is None:
                channel.basic_ack(tag)
            else:
                channel.basic_nack(tag, requeue=requeue)

    def _home(self, actor: str) -> str:
        """The queue whose dead-letter queue takes ``actor``'s dead letters (partitions share one)."""
        return self.broker.topology.actor_queues[actor]

    def _owns(self, message: dramatiq.broker.MessageProxy) -> bool:
        return isinstance(message, _Delivery) and message.consumer is self

    def acknowledge_early(self, message: _Delivery) -> None:
        """Acknowledge a delivery before its actor ends; its later ack or nack sends nothing."""
        if not message.settled:
            message.settled = True
            self._ack(message.tag)

    def ack(self, message: dramatiq.broker.MessageProxy) -> None:
        if not self._owns(message):
            logger.debug("Not acking %s: its channel closed, RabbitMQ redelivers it.", message.message_id)
        elif outcome_of(message).requeue_in_place:
            # Back to the head of its queue (quorum queues redeliver returned messages first).
            self._reject(message.tag, requeue=True)
        elif not message.settled:
            self._ack(message.tag)

    def nack(self, message: dramatiq.broker.MessageProxy) -> None:
        if not self._owns(message):
            logger.debug("Not rejecting %s: its channel closed, RabbitMQ redelivers it.", message.message_id)
            return
        assert isinstance(message, _Delivery)
        if outcome_of(message).drop:
            logger.warning("Dropping %s of %s after its retries.", message.message_id, message.actor_name)
            if not message.settled:
                self._ack(message.tag)
            return
        reason = outcome_of(message).dead_letter or reason_for(message, reason="rejected", exception=message._exception)
        reason = replace(reason, queue=message.queue, routing_key=message.routing_key)
        body = encode_message(message._message)
        home = self._home(message.actor_name)
        if message.settled:
            # Acknowledged on start: only the dead letter is left to publish.
            self.broker.dead_letter(body, message_id=message.message_id, reason=reason, queue=home)
            return
        self._dead_letter(message.tag, body, message.message_id, reason, home)

    def requeue(self, messages: Iterable[dramatiq.broker.MessageProxy]) -> None:
        """Unacked deliveries return to their queues when the channel closes."""

    def close(self) -> None:
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
