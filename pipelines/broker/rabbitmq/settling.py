"""Settling deliveries (ack, nack) from worker threads, in batches on the consumer's connection.

A delivery is settled on the channel it came on, and pika's connections belong to one thread: worker
threads ask the consumer's connection to run a callback on its own thread. Worker threads finish
messages concurrently, and each wake-up of the connection's loop is a lock and a syscall, so
settlements gather in a queue and one callback sends all of them.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dramatiq.errors import ConnectionClosed

from pipelines.broker.rabbitmq.confirms import CONNECTION_ERRORS
from pipelines.broker.rabbitmq.connections import dramatiq_error


class Settlements:
    """Acks and nacks of one consumer's deliveries, sent in batches (see the module docstring)."""

    def __init__(self, *, connection: Any, channel: Any) -> None:
        self.connection = connection
        self.channel = channel
        self._queued: deque[tuple[int, bool | None]] = deque()
        """(delivery tag, None to ack | whether to requeue a nack)."""
        self._flush_scheduled = False

    def ack(self, tag: int) -> None:
        """Acknowledge delivery ``tag`` soon (from any thread).

        Raises:
            ConnectionClosed: The consumer's connection is gone (Dramatiq's worker then reconnects).
        """
        self._settle(tag, None)

    def reject(self, tag: int, *, requeue: bool) -> None:
        """Reject delivery ``tag`` soon, back to its queue or not (from any thread; see :meth:`ack`)."""
        self._settle(tag, requeue)

    def _settle(self, tag: int, requeue: bool | None) -> None:
        self._queued.append((tag, requeue))
        if self._flush_scheduled:
            return
        self._flush_scheduled = True
        try:
            self.connection.add_callback_threadsafe(self._flush)
        except CONNECTION_ERRORS as e:
            raise dramatiq_error(ConnectionClosed, str(e)) from None

    def _flush(self) -> None:
        # Cleared before draining: a settlement queued meanwhile schedules the next flush.
        self._flush_scheduled = False
        # pika's blocking channel writes to the socket after every ack; the channel it wraps only
        # queues the frame. All but the last go through the latter, and the last one's blocking call
        # writes the whole batch.
        while self._queued:
            tag, requeue = self._queued.popleft()
            channel = self.channel if not self._queued else self.channel._impl
            if requeue is None:
                channel.basic_ack(tag)
            else:
                channel.basic_nack(tag, requeue=requeue)
