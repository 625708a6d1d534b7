"""Settling deliveries (ack, nack) from worker threads, in batches on the consumer's connection.

A delivery is settled on the channel it came on, and pika's connections belong to one thread: worker
threads ask the consumer's connection to run a callback on its own thread. Worker threads finish
messages concurrently, and each wake-up of the connection's loop is a lock and a syscall, so
settlements gather in a queue and one callback sends all of them.

The callback is handed to the connection's I/O loop itself, not through ``BlockingConnection``'s
``add_callback_threadsafe`` (which turns it into a timer and makes the consumer's wait for deliveries
return to dispatch it), and its frames are queued on the channel without a blocking flush of their own:
the loop the consumer is already turning writes them. That was about a quarter of the consumer
thread's time on chains.

Acks below the oldest delivery still open go as one ``multiple`` ack: on a quorum queue each ack is a
command of the queue's log, and RabbitMQ spends about half as much per message on acks sent four at
a time. The consumer tells this class of every delivery it receives (:meth:`Settlements.delivered`),
so a ``multiple`` ack never covers a delivery still running or about to be rejected (rejections go
first, one by one).
"""

from __future__ import annotations

import threading
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
        self._loop = connection._impl.ioloop
        """The connection's I/O loop, whose ``add_callback_threadsafe`` any thread may call."""
        self._queued: deque[tuple[int, bool | None]] = deque()
        """(delivery tag, None to ack | whether to requeue a nack)."""
        self._flush_scheduled = False
        self._open: dict[int, str] = {}
        """Tags delivered and not settled yet, each with its queue (the consumer's thread only)."""
        self._held: dict[str, int] = {}
        """How many of them each queue has: what the worker's heartbeat reads (see :meth:`unacked`)."""
        self._held_lock = threading.Lock()

    def delivered(self, tag: int, queue: str) -> None:
        """A delivery from ``queue`` arrived (on the consumer's thread, before anything can settle it)."""
        self._open[tag] = queue
        with self._held_lock:
            self._held[queue] = self._held.get(queue, 0) + 1

    def unacked(self) -> dict[str, int]:
        """Per queue, the deliveries not acknowledged or rejected yet (from any thread): prefetched and
        waiting for a worker thread, running, or held; a settlement counts once it is sent."""
        with self._held_lock:
            return {queue: count for queue, count in self._held.items() if count}

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
        if not self.connection.is_open:
            self._flush_scheduled = False
            raise dramatiq_error(ConnectionClosed, "the consumer's connection is closed")
        try:
            self._loop.add_callback_threadsafe(self._flush)
        except CONNECTION_ERRORS as e:
            raise dramatiq_error(ConnectionClosed, str(e)) from None

    def _flush(self) -> None:
        # Cleared before draining: a settlement queued meanwhile schedules the next flush.
        self._flush_scheduled = False
        rejects: list[tuple[int, bool]] = []
        acks: list[int] = []
        while self._queued:
            tag, requeue = self._queued.popleft()
            if requeue is None:
                acks.append(tag)
            else:
                rejects.append((tag, requeue))
            queue = self._open.pop(tag, None)
            if queue is not None:
                with self._held_lock:
                    self._held[queue] -= 1
        oldest_open = min(self._open, default=None)
        covered = [tag for tag in acks if oldest_open is None or tag < oldest_open]
        frames: list[tuple[str, int, bool]] = [("nack", tag, requeue) for tag, requeue in rejects]
        if covered:
            frames.append(("ack", max(covered), len(covered) > 1))
        frames += [("ack", tag, False) for tag in acks if oldest_open is not None and tag > oldest_open]
        # Queued on the channel pika's blocking channel wraps (which would write and wait after every
        # frame): this runs inside the connection's loop, which writes them on its next turn.
        channel = self.channel._impl
        for kind, tag, flag in frames:
            if kind == "ack":
                channel.basic_ack(tag, multiple=flag)
            else:
                channel.basic_nack(tag, requeue=flag)
