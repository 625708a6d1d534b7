"""The long-running window: one per process, a slot for each worker thread that may run a long job.

A long-running job is acknowledged when it starts (its lease owns it from then on). Were its queue
subscribed to like the others, that acknowledgement would free the queue's prefetch slot, and with
every thread busy the next delivery would wait unacknowledged in memory until RabbitMQ's consumer
timeout closed the channel (and redelivered it, while the copy held here still ran later). So a
long-running message is taken only into a free slot of this window (see ``polling``), and its slot is
given back when the job ends. One window serves every consumer and long-running queue of the
process, so no number of queue names takes in more jobs than the process has threads; and as
nothing is taken without a slot, nothing is handed back unstarted either (a return counts against
its queue's delivery limit and as an attempt of the job).

On shutdown the window closes for good before the worker stops its threads: nothing more is taken,
and what was taken but not started goes back to its queue at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class LongRunningWindow:
    """The slots of this process's long-running jobs (see the module docstring)."""

    def __init__(self, *, capacity: int, on_free: Callable[[], None]) -> None:
        self.capacity = max(1, capacity)
        """Slots: the worker threads of the process."""
        self.running = 0
        """Slots taken: messages taken and not settled yet (acknowledged early still runs)."""
        self.stopping = False
        """The worker shuts down: take nothing more."""
        self._on_free = on_free
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take a slot for one message about to be fetched: False when none is free (or on shutdown)."""
        with self._lock:
            if self.stopping or self.running >= self.capacity:
                return False
            self.running += 1
            return True

    def give_back(self) -> None:
        """Give back a slot taken for a message that did not come (its queue was empty); wakes nobody."""
        with self._lock:
            self.running -= 1

    def release(self) -> None:
        """A message taken into a slot was settled (its job ended, or it never started): the consumers
        are woken, so that one of them takes the next job at once."""
        with self._lock:
            self.running -= 1
        self._on_free()

    @property
    def full(self) -> bool:
        """No slot is free for another long-running job (or the worker shuts down)."""
        return self.stopping or self.running >= self.capacity
