"""The embedded broker: Dramatiq's StubBroker with the same exchanges, bindings and routing.

Nothing leaves the process. A publish is matched against the same bindings RabbitMQ would use (see
``pipelines.wire.topology``) and each matching actor gets its own resolved copy, so a fan-out is still one
publish and an event still reaches every subscriber. Delayed messages wait in the worker's memory (the
stub's delay queues), which is fine for tests and demos and is why production uses RabbitMQ.

Each body taken from a queue is screened as RabbitMQ's consumer screens a delivery (the same
``pipelines.broker.screening``): one that is not a message for an actor of its queue is kept as that
queue's dead letter with the reason, and never reaches a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from queue import Empty, Queue
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import current_millis, dq_name
from dramatiq.errors import QueueNotFound

from pipelines import options as opt
from pipelines.broker.common import HookDispatch, TopologyCache, check_size, event_message, validate_actor
from pipelines.broker.screening import letter_id, named_actor, screen, screened_out_reason, shared_queue_actor
from pipelines.config.sections import BrokerConfig
from pipelines.dead_letters.reasons import DeadLetterReason, RawDeadLetter
from pipelines.errors import DefinitionError, Unroutable
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.outcome import outcome_of
from pipelines.handling.proxy import DeliveredMessage, message_of
from pipelines.sending.outbound import Outbound
from pipelines.wire import naming
from pipelines.wire.codec import encode_message
from pipelines.wire.routing import route_of, topic_matches
from pipelines.wire.shared_bodies import UnresolvableMessage, resolve
from pipelines.wire.topology import Topology

logger = logging.getLogger(__name__)


class MemoryBroker(HookDispatch, StubBroker):
    """In-process broker routing like the namespace's exchanges (see the module docstring)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        namespace: str,
        outbound: Outbound,
        middleware: list[dramatiq.Middleware] | None = None,
    ) -> None:
        super().__init__(middleware=middleware, fail_fast_default=False)
        self.config = config
        self.namespace = namespace
        self.outbound = outbound
        self.actor_options |= {opt.SUBSCRIBE, opt.BROKER_PRIORITY}  # the latter refused with a sentence
        self.publish_count = 0
        self.confirm_waits = 0
        """Always 0: nothing to confirm in memory."""
        self._topology = TopologyCache(namespace=namespace, config=config)
        self._published_letters: list[RawDeadLetter] = []
        """Dead letters published with :meth:`dead_letter` (bodies screened out, lost long-running jobs)."""

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
        return [actor for actor, names in topology.consume_queues.items() if not queues.isdisjoint(names)]

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        """Route one message to every matching actor (``delay`` in milliseconds)."""
        return self.enqueue_many([message], delay=delay)[0]

    def prepare(self, message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
        """``message`` as it would be published, not published (see ``PipelineBroker.prepare``)."""
        [(prepared, _)] = self.outbound.prepare(self.actors, [message], accepted=self.actor_options)
        return prepared

    def enqueue_many(
        self, messages: Sequence[dramatiq.Message[Any]], *, delay: int | None = None
    ) -> list[dramatiq.Message[Any]]:
        """Route messages like the exchanges would.

        Raises:
            MessageTooLarge: A body is over ``broker.max_message_bytes``.
            Unroutable: No actor matches a message's routing key.
        """
        routed = []
        for prepared, wait in self._prepare(messages, delay):
            message = prepared
            if wait and route_of(message).exchange != "work":
                raise DefinitionError("Events cannot be delayed; delay the actor that publishes them.")
            if wait:
                message = message.copy(options={opt.ETA: current_millis() + wait})
            body = encode_message(message)
            check_size(message, body, self.config.max_message_bytes)
            self.outbound.check_body(message, body)
            targets = self._targets(message)
            if not targets:
                raise Unroutable(
                    f"No queue in namespace {self.namespace!r} is bound for {route_of(message).routing_key}: no "
                    "declared actor has that name, or no actor subscribes to that topic."
                )
            routed.append((message, wait, targets))
        for message, wait, targets in routed:
            self.emit_before("enqueue", message, wait)
            self.publish_count += 1
            for actor_name in targets:
                group = self.actors[actor_name].queue_name
                copy = resolve(message, actor_name=actor_name, queue_name=group)
                queue = group
                if wait:
                    queue = dq_name(group)
                    copy = copy.copy(queue_name=queue, options={opt.DUE: True})
                self.queues[queue].put(encode_message(copy))
            self.emit_after("enqueue", message, wait)
        return [message for message, _, _ in routed]

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 100) -> dramatiq.broker.Consumer:
        if queue_name not in self.queues:
            raise QueueNotFound(queue_name)  # type: ignore[no-untyped-call]
        return _MemoryConsumer(self, queue_name, prefetch=prefetch, timeout_ms=timeout)

    def screen(self, body: bytes, queue_name: str) -> dramatiq.Message[Any]:
        """The message a body taken from ``queue_name`` is (see ``pipelines.broker.screening.screen``)."""
        message, _ = screen(
            body,
            None,
            actor=None,
            queue_name=queue_name,
            max_bytes=self.config.max_message_bytes,
            actors=self.actors,
        )
        return message

    def dead_letter_body(self, body: bytes, queue_name: str, error: Exception) -> None:
        """Keep a body :meth:`screen` raised on as the dead letter of the actor it names on ``queue_name``
        (or, naming none of them, of the queue's first actor), with the reason."""
        try:
            actor = shared_queue_actor(named_actor(body), queue_name, self.actors)
        except UnresolvableMessage:
            actor = shared_queue_actor(None, queue_name, self.actors)
        home = self.topology.actor_queues[actor]
        logger.error("Dead-lettering a message on queue %r: %s: %s.", queue_name, type(error).__name__, error)
        self.dead_letter(
            body, message_id=letter_id(body), reason=screened_out_reason(error, actor=actor, queue=home), queue=home
        )

    def acknowledge_early(self, message: dramatiq.broker.MessageProxy) -> None:
        """Nothing to do: no consumer timeout applies in memory (see ``ExchangeBroker``)."""

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Keep ``body`` as a dead letter of ``queue``'s actor, with ``reason`` (see ``DeadLetterAdmin``)."""
        dead = naming.dead_letter_queue(queue)
        self._published_letters.append(RawDeadLetter(dead, body, reason.to_headers(), message_id))

    def _prepare(
        self, messages: Sequence[dramatiq.Message[Any]], delay: int | None
    ) -> list[tuple[dramatiq.Message[Any], int | None]]:
        # Dramatiq's worker re-enqueues a delayed message when it is due: it was prepared (validated,
        # sealed, rate-limited) when first published, so it goes straight back to its queue.
        due = [m for m in messages if m.options.get(opt.DUE)]
        if not due:
            return self.outbound.prepare(self.actors, messages, delay, accepted=self.actor_options)
        fresh = [m for m in messages if not m.options.get(opt.DUE)]
        back: list[tuple[dramatiq.Message[Any], int | None]] = [
            (dramatiq.Message(**{**m.asdict(), "options": _without(m.options, opt.DUE)}), None) for m in due
        ]
        return [*self.outbound.prepare(self.actors, fresh, delay, accepted=self.actor_options), *back]

    def _dead_letter_entries(self, queue: str) -> list[tuple[list[Any], int, RawDeadLetter]]:
        """The dead letters of ``queue``, each with the list it is kept in and its place there: the worker's
        rejected messages (the stub's dead letters), then those published with :meth:`dead_letter`."""
        topology = self.topology
        entries: list[tuple[list[Any], int, RawDeadLetter]] = []
        for proxies in self.dead_letters_by_queue.values():
            for index, proxy in enumerate(proxies):
                source = topology.actor_queues.get(proxy.actor_name, "")
                if naming.dead_letter_queue(source) != queue:
                    continue
                reason = outcome_of(proxy).settlement.dead_letter
                headers = reason.to_headers() if reason else {}
                letter = RawDeadLetter(queue, encode_message(message_of(proxy)), headers, proxy.message_id)
                entries.append((proxies, index, letter))
        published = self._published_letters
        entries += [(published, index, letter) for index, letter in enumerate(published) if letter.queue == queue]
        return entries

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, oldest first, left in place."""
        return [letter for _, _, letter in self._dead_letter_entries(queue)][:limit]

    def remove_dead_letters(self, queue: str, remove: Callable[[RawDeadLetter], bool]) -> None:
        """Hand each dead letter of ``queue`` to ``remove``, oldest first; those it returns True for are
        deleted, and an error it raises keeps that letter and the later ones."""
        taken: list[tuple[list[Any], int]] = []
        try:
            for kept, index, letter in self._dead_letter_entries(queue):
                if remove(letter):
                    taken.append((kept, index))
        finally:
            for kept, index in reversed(taken):
                kept.pop(index)

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue`` (the only queues kept here between calls)."""
        entries = self._dead_letter_entries(queue)
        for proxies, index, _ in reversed(entries):
            proxies.pop(index)
        return len(entries)

    def publish_event(
        self, topic: str, payload: Any, *, options: dict[str, Any] | None = None
    ) -> dramatiq.Message[Any]:
        """Publish a domain event to every subscribed actor (see ``ExchangeBroker.publish_event``)."""
        return self.enqueue(event_message(topic, payload, options))


class _MemoryConsumer(dramatiq.broker.Consumer):
    """Consumes one memory queue: screens each body (see the module docstring), and settles retries in
    place and dropped messages as RabbitMQ's consumer does."""

    def __init__(self, broker: MemoryBroker, queue_name: str, *, prefetch: int, timeout_ms: int) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.queue: Queue[bytes] = broker.queues[queue_name]
        self.dead_letters: list[dramatiq.broker.MessageProxy] = broker.dead_letters_by_queue[queue_name]
        self.timeout_s = timeout_ms / 1000
        self._slots = threading.Semaphore(prefetch)
        """One per message taken and not settled yet (Dramatiq's prefetch)."""

    def __next__(self) -> dramatiq.broker.MessageProxy | None:
        if not self._slots.acquire(timeout=self.timeout_s):
            return None
        try:
            body = self.queue.get(timeout=self.timeout_s)
        except Empty:
            self._slots.release()
            return None
        try:
            message = self.broker.screen(body, self.queue_name)
        except Exception as e:  # whatever the queue held, it must not reach Dramatiq's consumer loop
            try:
                self.broker.dead_letter_body(body, self.queue_name, e)
            except Exception:  # no dead letter could be made of it: said here, never raised to the loop
                logger.exception("Dropping a message on queue %r that could not be dead-lettered.", self.queue_name)
            self._settle()
            return None
        return _Delivery(message)

    def _settle(self) -> None:
        self.queue.task_done()
        self._slots.release()

    def ack(self, message: dramatiq.broker.MessageProxy) -> None:
        if isinstance(message, LocalDelivery):
            return  # taken from no queue
        if outcome_of(message).settlement.requeue_in_place:
            # Memory queues have no head to return to: the retry goes to the back (order is not kept),
            # with the retry count ``Backoff`` already added to its options.
            self.queue.put(encode_message(message_of(message)))
        self._settle()

    def nack(self, message: dramatiq.broker.MessageProxy) -> None:
        if not outcome_of(message).settlement.drop:
            self.dead_letters.append(message)
        if not isinstance(message, LocalDelivery):
            self._settle()

    def requeue(self, messages: Iterable[dramatiq.broker.MessageProxy]) -> None:
        """Nothing to return (the worker stops with the process, and its memory queues with it), but local
        steps, which no queue held: they are published."""
        for message in messages:
            if isinstance(message, LocalDelivery):
                message.hand_back(self.broker)

    def close(self) -> None:
        """Nothing to close."""


class _Delivery(DeliveredMessage):
    """A message taken from a memory queue; it keeps its actor's exception, as the stub's messages do,
    so that ``join(fail_fast=True)`` can raise it."""

    def clear_exception(self) -> None:
        """Kept (see the class docstring): the garbage collector breaks the cycle once it is unused."""


def _without(options: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k != key}
