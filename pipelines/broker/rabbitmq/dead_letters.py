"""The dead-letter queues in RabbitMQ: put letters in with their reason, read, take and purge them.

A letter goes to the namespace's dead-letter exchange, routed by its actor queue to that queue's
``.dead`` queue, with its :class:`~pipelines.dead_letters.reasons.DeadLetterReason` in AMQP headers.

Reading must never count against a letter. A quorum queue counts every delivery that goes back to it
unacknowledged, and drops a message past its delivery limit (RabbitMQ 4.0 sets one of 20 by default;
an operator's policy can set one on any version). So a read is a *pass*: the letters are taken on a
connection of its own, the ones kept are published again to the back of their queue, in order and
confirmed, and only then are the originals acknowledged. Each copy starts with a delivery count of
0, and a pass that breaks off acknowledges nothing (its letters come back once, with the copies it
had confirmed: a letter may then show twice, and a later pass keeps one of the two).

A pass reads at most :data:`MAX_PASS_LETTERS` letters of a queue. Listings are cached while a queue's
depth stays the same (for up to :data:`LISTING_FRESH_S`), so a console page that refreshes does not
rewrite the queue each time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika.exceptions

from pipelines.broker.rabbitmq.confirms import CONNECTION_ERRORS, ConfirmPublisher, Outgoing
from pipelines.broker.rabbitmq.connections import Connections
from pipelines.broker.rabbitmq.declaring import Declarer
from pipelines.broker.rabbitmq.publishing import Publishing
from pipelines.dead_letters.reasons import DeadLetterReason, RawDeadLetter
from pipelines.errors import PublishError
from pipelines.wire import naming

#: The most letters one pass reads of a dead-letter queue (one listing, replay or lookup).
MAX_PASS_LETTERS = 10_000
#: How long a pass waits for a letter its queue's depth promised (another reader may hold it), in s.
PASS_QUIET_S = 2.0
#: Longest a listing is reused while its queue's depth is unchanged, in s.
LISTING_FRESH_S = 30.0
#: RabbitMQ's header with a quorum queue's count of earlier deliveries: a copy starts without it.
DELIVERY_COUNT_HEADER = "x-delivery-count"


@dataclass(frozen=True)
class _Listing:
    depth: int
    letters: list[RawDeadLetter]
    at: float


class RabbitDeadLetters:
    """:class:`~pipelines.dead_letters.reasons.DeadLetterAdmin` on RabbitMQ (see the module docstring)."""

    def __init__(
        self, *, connections: Connections, declarer: Declarer, publishing: Publishing, ensure: Callable[[], None]
    ) -> None:
        self.connections = connections
        self.declarer = declarer
        self.publishing = publishing
        self.ensure = ensure
        """Declares the topology (its dead-letter exchange and queues) if it is not yet."""
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Publish ``body`` to actor queue ``queue``'s dead-letter queue with ``reason`` in its headers."""
        self.ensure()
        exchange = naming.dead_letter_exchange(self.declarer.namespace)
        self.publishing.publish([Outgoing(exchange, queue, body, message_id, reason.to_headers())])
        self._listings.pop(naming.dead_letter_queue(queue), None)

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, left in place (see the module docstring)."""
        depth = self.declarer.depth(queue)
        if not depth:
            return []
        with self._lock:
            cached = self._listings.get(queue)
            if cached is None or cached.depth != depth or time.monotonic() - cached.at > LISTING_FRESH_S:
                cached = _Listing(depth, self._pass(queue, lambda _letter: False), time.monotonic())
                self._listings[queue] = cached
        return cached.letters[:limit]

    def remove_dead_letters(self, queue: str, remove: Callable[[RawDeadLetter], bool]) -> None:
        """Hand each letter of ``queue`` to ``remove``, oldest first; those it returns True for leave the
        queue, the others stay in their order. An error it raises keeps that letter and every later one,
        and is raised once the pass has put them back."""
        with self._lock:
            self._listings.pop(queue, None)
            self._pass(queue, remove)

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; returns how many there were."""
        with self._lock:
            self._listings.pop(queue, None)
            return self.declarer.purge(queue)

    def _pass(self, queue: str, remove: Callable[[RawDeadLetter], bool]) -> list[RawDeadLetter]:
        """One pass over ``queue``: the letters kept, in order (see the module docstring).

        Raises:
            BrokerUnavailable: RabbitMQ did not answer (the letters stay, each delivered once more).
            PublishError: The copies were not all confirmed (likewise).
        """
        try:
            publisher = ConfirmPublisher(self.connections.candidates(), confirm=True)
        except CONNECTION_ERRORS as e:
            raise self.connections.unavailable(e) from None
        try:
            return _Pass(publisher, queue).run(remove)
        except CONNECTION_ERRORS as e:
            raise self.connections.unavailable(e) from None
        finally:
            publisher.close()


class _Pass:
    """One pass over a dead-letter queue on a connection of its own (see the module docstring)."""

    def __init__(self, publisher: ConfirmPublisher, queue: str) -> None:
        self.publisher = publisher
        self.queue = queue
        self.channel = publisher.connection.channel()

    def run(self, remove: Callable[[RawDeadLetter], bool]) -> list[RawDeadLetter]:
        delivered = self._take()
        kept: list[tuple[Any, RawDeadLetter]] = []
        seen: set[tuple[str, bytes, str]] = set()
        failure: BaseException | None = None
        for properties, letter in delivered:
            identity = (letter.message_id, letter.body, repr(sorted(letter.headers.items())))
            if identity in seen:
                continue  # the second copy of a letter an interrupted pass left twice
            seen.add(identity)
            if failure is None:
                try:
                    if remove(letter):
                        continue
                except BaseException as e:  # kept, and raised once the letters are back in place
                    failure = e
            kept.append((properties, letter))
        if delivered:
            self._put_back(kept)
            self.channel.basic_ack(0, multiple=True)  # every letter of this pass, now copied or removed
        if failure is not None:
            raise failure
        return [letter for _, letter in kept]

    def _take(self) -> list[tuple[Any, RawDeadLetter]]:
        """The letters of the queue, at most ``MAX_PASS_LETTERS``, delivered and unacknowledged."""
        try:
            depth = self.channel.queue_declare(self.queue, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker:
            return []  # no such queue (yet)
        wanted = min(depth, MAX_PASS_LETTERS)
        if not wanted:
            return []
        # No more than that is delivered, so none is left unacknowledged when the consumer is cancelled.
        self.channel.basic_qos(prefetch_count=wanted)
        delivered: list[tuple[Any, RawDeadLetter]] = []
        for method, properties, body in self.channel.consume(self.queue, inactivity_timeout=PASS_QUIET_S):
            if method is None:
                break  # another reader holds the rest for now
            headers = {k: v for k, v in (properties.headers or {}).items() if k != DELIVERY_COUNT_HEADER}
            delivered.append((properties, RawDeadLetter(self.queue, body, headers, properties.message_id or "")))
            if len(delivered) == wanted:
                break
        self.channel.cancel()
        return delivered

    def _put_back(self, kept: list[tuple[Any, RawDeadLetter]]) -> None:
        copies = [
            Outgoing("", self.queue, letter.body, letter.message_id, dict(letter.headers), properties.priority)
            for properties, letter in kept
        ]
        if copies and self.publisher.publish(copies):
            raise PublishError(f"Dead-letter queue {self.queue} was deleted while it was read.")
