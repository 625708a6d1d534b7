"""The dead-letter queues in RabbitMQ: put letters in with their reason, read, take and purge them.

A letter goes to the namespace's dead-letter exchange, routed by its actor queue to that queue's
``.dead`` queue, with its :class:`~pipelines.dead_letters.DeadLetterReason` in AMQP headers. Reading
uses ``basic.get`` on a channel of its own without acknowledging, so closing the channel puts back
whatever was read; taking a letter acknowledges it once the caller's block succeeded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pika.exceptions

from pipelines import naming
from pipelines.broker.rabbitmq.confirms import Outgoing
from pipelines.broker.rabbitmq.connections import Connections
from pipelines.broker.rabbitmq.declaring import Declarer
from pipelines.broker.rabbitmq.publishing import Publishing
from pipelines.dead_letters import DeadLetterReason, RawDeadLetter


class RabbitDeadLetters:
    """:class:`~pipelines.dead_letters.DeadLetterAdmin` on RabbitMQ (see the module docstring)."""

    def __init__(
        self, *, connections: Connections, declarer: Declarer, publishing: Publishing, ensure: Callable[[], None]
    ) -> None:
        self.connections = connections
        self.declarer = declarer
        self.publishing = publishing
        self.ensure = ensure
        """Declares the topology (its dead-letter exchange and queues) if it is not yet."""

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None:
        """Publish ``body`` to actor queue ``queue``'s dead-letter queue with ``reason`` in its headers."""
        self.ensure()
        exchange = naming.dead_letter_exchange(self.declarer.namespace)
        self.publishing.publish([Outgoing(exchange, queue, body, message_id, reason.to_headers())])

    def peek_dead_letters(self, queue: str, limit: int) -> list[RawDeadLetter]:
        """Up to ``limit`` dead letters of ``queue``, left in place."""
        letters: list[RawDeadLetter] = []
        with self._reader() as reader:
            while len(letters) < limit and (got := reader.next(queue)) is not None:
                letters.append(got[1])
        return letters

    @contextlib.contextmanager
    def taking_dead_letter(self, queue: str, message_id: str) -> Iterator[RawDeadLetter | None]:
        """The dead letter ``message_id`` of ``queue``, removed from it if the block ends without error."""
        with self._reader() as reader:
            found = None
            while found is None and (got := reader.next(queue)) is not None:
                if got[1].message_id == message_id:
                    found = got
            yield found[1] if found else None
            if found:
                reader.ack(found[0])

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; returns how many there were."""
        return self.declarer.purge(queue)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[_Reader]:
        channel = self.connections.alive().connection.channel()
        try:
            yield _Reader(channel)
        finally:
            # Everything read and not acknowledged goes back to its queue.
            if channel.is_open:
                channel.close()


class _Reader:
    """Reads letters on a channel of its own without acknowledging them."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel

    def next(self, queue: str) -> tuple[int, RawDeadLetter] | None:
        """The next letter of ``queue`` with its delivery tag; None at its end, or if it does not exist."""
        if not self.channel.is_open:
            return None  # RabbitMQ closed it: no such queue (yet)
        try:
            method, properties, body = self.channel.basic_get(queue, auto_ack=False)
        except pika.exceptions.ChannelClosedByBroker:
            return None
        if method is None:
            return None
        return method.delivery_tag, RawDeadLetter(queue, body, properties.headers or {}, properties.message_id or "")

    def ack(self, tag: int) -> None:
        self.channel.basic_ack(tag)
