"""The embedded broker: Dramatiq's StubBroker with the same exchanges, bindings and routing.

Nothing leaves the process. A publish is matched against the same bindings RabbitMQ would use (see
``pipelines.topology``) and each matching actor gets its own resolved copy, so a fan-out is still one
publish and an event still reaches every subscriber. Delayed messages wait in the worker's memory (the
stub's delay queues), which is fine for tests and demos and is why production uses RabbitMQ.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from queue import Queue
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import current_millis, dq_name

from pipelines import naming
from pipelines import options as opt
from pipelines.broker.common import HookDispatch, TopologyCache, check_size, event_message, validate_actor
from pipelines.codec import decode_message, encode_message
from pipelines.config import BrokerConfig
from pipelines.dead_letters import DeadLetterReason, RawDeadLetter
from pipelines.delivery import resolve
from pipelines.errors import DefinitionError, Unroutable
from pipelines.outbound import Outbound
from pipelines.outcome import outcome_of
from pipelines.routing import route_of, topic_matches
from pipelines.topology import Topology


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
        return _MemoryConsumer(super().consume(queue_name, prefetch, timeout), self.queues[queue_name])

    def acknowledge_early(self, message: dramatiq.broker.MessageProxy) -> None:
        """Nothing to do: no consumer timeout applies in memory (see ``ExchangeBroker``)."""

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Keep a message of ``queue``'s actor as its dead letter, with ``reason`` (see ``DeadLetterAdmin``)."""
        message = decode_message(body)
        proxy = dramatiq.broker.MessageProxy(message)
        outcome_of(proxy).dead_letter = reason
        self.dead_letters_by_queue[message.queue_name].append(proxy)

    def _prepare(
        self, messages: Sequence[dramatiq.Message[Any]], delay: int | None
    ) -> list[tuple[dramatiq.Message[Any], int | None]]:
        # Dramatiq's worker re-enqueues a delayed message when it is due: it was prepared (validated,
        # sealed, rate-limited) when first published, so it goes straight back to its queue.
        due = [m for m in messages if m.options.get(opt.DUE)]
        if not due:
            return self.outbound.prepare(self.actors, messages, delay)
        fresh = [m for m in messages if not m.options.get(opt.DUE)]
        back: list[tuple[dramatiq.Message[Any], int | None]] = [
            (dramatiq.Message(**{**m.asdict(), "options": _without(m.options, opt.DUE)}), None) for m in due
        ]
        return [*self.outbound.prepare(self.actors, fresh, delay), *back]

    def _dead_letter_entries(self, queue: str) -> list[tuple[list[dramatiq.broker.MessageProxy], int, RawDeadLetter]]:
        topology = self.topology
        entries = []
        for proxies in self.dead_letters_by_queue.values():
            for index, proxy in enumerate(proxies):
                source = topology.actor_queues.get(proxy.actor_name, "")
                if naming.dead_letter_queue(source) != queue:
                    continue
                reason = outcome_of(proxy).dead_letter
                headers = reason.to_headers() if reason else {}
                letter = RawDeadLetter(queue, encode_message(proxy._message), headers, proxy.message_id)
                entries.append((proxies, index, letter))
        return entries

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, oldest first, left in place."""
        return [letter for _, _, letter in self._dead_letter_entries(queue)][:limit]

    @contextlib.contextmanager
    def taking_dead_letter(self, queue: str, message_id: str) -> Iterator[RawDeadLetter | None]:
        """The dead letter ``message_id`` of ``queue``, removed if the block ends without error."""
        found = next((e for e in self._dead_letter_entries(queue) if e[2].message_id == message_id), None)
        yield found[2] if found else None
        if found:
            found[0].pop(found[1])

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
    """The stub's consumer, settling retries in place and dropped messages as RabbitMQ's does."""

    def __init__(self, inner: dramatiq.broker.Consumer, queue: Queue[bytes]) -> None:
        self.inner = inner
        self.queue = queue

    def __next__(self) -> dramatiq.broker.MessageProxy | None:
        return next(self.inner)

    def ack(self, message: dramatiq.broker.MessageProxy) -> None:
        if outcome_of(message).requeue_in_place:
            # Memory queues have no head to return to: the retry goes to the back (order is not kept),
            # with the retry count ``Backoff`` already added to its options.
            self.queue.put(encode_message(message._message))
        self.inner.ack(message)

    def nack(self, message: dramatiq.broker.MessageProxy) -> None:
        if outcome_of(message).drop:
            self.inner.ack(message)
        else:
            self.inner.nack(message)

    def requeue(self, messages: Iterable[dramatiq.broker.MessageProxy]) -> None:
        self.inner.requeue(messages)

    def close(self) -> None:
        self.inner.close()


def _without(options: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k != key}
