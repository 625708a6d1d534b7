"""The consuming window of long-running queues: closed while every worker thread runs one of their jobs.

A long-running job is acknowledged when it starts (its lease owns it from then on), which frees its
queue's prefetch slot. Left open, that slot takes the next delivery at once, and with every thread busy
the delivery would wait unacknowledged in memory until RabbitMQ's consumer timeout closes the channel
(and redelivers it, while the copy held here still runs later). So a consumer counts the long-running
deliveries it handed to the worker and that are not settled yet (acknowledged early does not count as
settled: the job still runs), and cancels its long-running consumers while that count equals the
worker's threads; it consumes again as soon as one of those jobs ends. Each long-running consumer has a
prefetch of one, so what reaches the worker is at most what its threads can run.

On shutdown the window closes for good before the worker stops its threads: nothing more is taken, and
what was taken but not started goes back to its queue at once.
"""

from __future__ import annotations

import threading


class LongRunningWindow:
    """How many long-running deliveries one consumer has out, against the threads that run them."""

    def __init__(self, queues: set[str], *, capacity: int) -> None:
        self.queues = queues
        """The long-running queues of the consumer (consumed one delivery at a time each)."""
        self.capacity = max(1, capacity)
        self.running = 0
        """Deliveries handed to the worker and not settled yet."""
        self.stopping = False
        """The worker shuts down: consume nothing more."""
        self._lock = threading.Lock()

    def add(self, queues: set[str]) -> None:
        """Count ``queues`` (long-running queues of actors declared later) in the window too."""
        with self._lock:
            self.queues = self.queues | queues  # a new set: readers in other threads see one or the other

    def admits(self, queue: str) -> bool:
        """May a delivery of ``queue`` go to the worker now? (Else it goes back to its queue.)"""
        if self.stopping:
            return False
        return queue not in self.queues or self.running < self.capacity

    def count(self, queue: str) -> bool:
        """Count a delivery of ``queue`` handed to the worker (only long-running ones count)."""
        if queue not in self.queues:
            return False
        with self._lock:
            self.running += 1
        return True

    def release(self) -> bool:
        """A counted delivery was settled (its job ended): True when this opened the window again."""
        with self._lock:
            self.running -= 1
            return self.running == self.capacity - 1

    @property
    def full(self) -> bool:
        """No thread is left for another long-running job (or the worker shuts down)."""
        return self.stopping or self.running >= self.capacity
