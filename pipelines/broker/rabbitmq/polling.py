"""Long-running queues, read one message at a time into the process's window (see ``window``).

A consumer never subscribes to its long-running queues: it fetches one message (``basic.get``) only
into a free slot of the window, so a message leaves its queue only when a thread is there to run it.
Each read looks at the queues' depths first (a passive declaration reads a quorum queue without
writing to its log, as an empty ``basic.get`` would), takes at most one message from each queue
while slots last, and starts from the queue after the one served last, so that no queue starves
another. A consumer reads at once when a slot is freed anywhere in the process or a queue is added,
and every ``POLL_INTERVAL_S`` otherwise (a job sent to an idle worker waits at most that long), and
never while the window is full. This is the project's one polling loop, because no subscription can
do it: prefetch is per consumer, and the one limit shared by consumers, global QoS, is per channel and
refused by quorum queues. Its idle cost is one passive declaration per queue per ``POLL_INTERVAL_S``
(2 requests per second per long-running queue per worker process).

Read this way, a long-running queue has no consumer in RabbitMQ's eyes; so the consumer also
subscribes to the queue's readers queue (:func:`~pipelines.wire.naming.readers_queue`), which holds
nothing (``x-max-length`` 0) and expires a minute after its last reader is gone: its consumers are
the workers reading the queue (``pipelines queues`` and ``pipelines topology`` count them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from pipelines.broker.rabbitmq.window import LongRunningWindow
from pipelines.wire.naming import readers_queue

#: Longest a long-running message waits in its queue while a slot is free, in seconds.
POLL_INTERVAL_S = 0.5
#: A readers queue: classic (it holds nothing worth replicating), empty, gone a minute after its last reader.
READERS_ARGUMENTS = {"x-queue-type": "classic", "x-max-length": 0, "x-expires": 60_000}


class Fetched(NamedTuple):
    """A message fetched from a long-running queue into a slot of the window."""

    queue: str
    method: Any
    properties: Any
    body: bytes


class LongRunningReader:
    """One consumer's long-running queues, read into the process's window (see the module docstring)."""

    def __init__(self, window: LongRunningWindow) -> None:
        self.window = window
        self.queues: list[str] = []
        self._next = 0
        """Index of the queue the next read starts with."""
        self._due = 0.0
        """``time.monotonic()`` of the next read (0: at once)."""
        self._announced: dict[str, str] = {}
        """Consumer tag of each readers subscription → its long-running queue."""

    def add(self, channel: Any, queues: Iterable[str]) -> None:
        """Read ``queues`` too, from the next read on, and announce this consumer as their reader."""
        for queue in queues:
            if queue not in self.queues:
                self.queues.append(queue)
                self._announce(channel, queue)
        self.wake()

    def _announce(self, channel: Any, queue: str) -> None:
        readers = readers_queue(queue)
        channel.queue_declare(readers, durable=False, arguments=READERS_ARGUMENTS)
        tag = channel.basic_consume(readers, _ignore, auto_ack=True)
        self._announced[tag] = queue

    def announces(self, tag: str) -> bool:
        """Is ``tag`` one of this reader's readers subscriptions?"""
        return tag in self._announced

    def announce_again(self, channel: Any, tag: str) -> None:
        """RabbitMQ cancelled readers subscription ``tag`` (its queue was deleted, or its node left): again."""
        queue = self._announced.pop(tag, None)
        if queue is not None:
            self._announce(channel, queue)

    def wake(self) -> None:
        """Read at the next turn (from any thread: a slot was freed)."""
        self._due = 0.0

    def wait_s(self, limit_s: float) -> float:
        """How long the consumer may wait for deliveries before its next read (at most ``limit_s``)."""
        if not self.queues or self.window.full:
            return limit_s
        return max(0.0, min(limit_s, self._due - time.monotonic()))

    def read(self, channel: Any, take: Callable[[Fetched], None]) -> None:
        """If a read is due, fetch at most one message of each queue into free slots, each handed to
        ``take`` as soon as it is fetched (so that a slot is never lost with a channel that fails)."""
        now = time.monotonic()
        if not self.queues or self.window.full or now < self._due:
            return
        self._due = now + POLL_INTERVAL_S
        count = len(self.queues)
        for step in range(count):
            index = (self._next + step) % count
            queue = self.queues[index]
            if channel.queue_declare(queue, passive=True).method.message_count == 0:
                continue
            if not self.window.take():
                break
            try:
                method, properties, body = channel.basic_get(queue)
            except BaseException:
                self.window.give_back()
                raise
            if method is None:  # another worker took it first
                self.window.give_back()
                continue
            take(Fetched(queue, method, properties, body))
            self._next = (index + 1) % count
            self._due = 0.0  # more may be waiting: read again at the next turn, while slots are free


def _ignore(*_: Any) -> None:
    """Nothing is kept in a readers queue; a message published to one anyway is dropped here."""
