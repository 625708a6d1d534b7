"""Dramatiq's message proxy and its worker's work queue, as the framework reads them: in this one module.

Dramatiq's ``MessageProxy`` wraps the message a consumer delivered (``_message``, no public name) and,
after a failure, the exception the actor raised (``_exception``); it settles a delivery by its public
``failed`` flag. Its worker hands deliveries to its threads through a priority queue of its items
(``_WorkQueueItem``), where a local step goes too, and from which a stopping worker's deliveries that no
thread started are taken back (:class:`WorkQueue`). Every other module goes through what is here.

Our brokers' deliveries are :class:`DeliveredMessage` s: the arguments an actor is called with are the
ones ``Payloads`` recorded in the outcome (sealed values opened, a typed payload validated), while the
message itself keeps its wire form for a retry or a dead letter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from queue import Empty
from typing import Any

import dramatiq

from pipelines.handling.outcome import outcome_of

#: The priority a local step is handed to a thread with: before any delivery (Dramatiq's are 0 and up).
FIRST = -1


def message_of(proxy: dramatiq.broker.MessageProxy) -> dramatiq.Message[Any]:
    """The message a delivery carries, in its wire form (to enqueue a copy, or dead-letter it)."""
    message: dramatiq.Message[Any] = proxy._message
    return message


def exception_of(proxy: dramatiq.broker.MessageProxy) -> BaseException | None:
    """The exception the actor raised on this delivery, if any."""
    exception: BaseException | None = proxy._exception
    return exception


def let_go(proxy: dramatiq.broker.MessageProxy) -> None:
    """Settle a failed delivery as done: a copy put off carries its failure (Dramatiq acknowledges a
    delivery that is not ``failed`` and rejects one that is)."""
    proxy.failed = False


class DeliveredMessage(dramatiq.broker.MessageProxy):
    """A delivery whose actor gets the arguments recorded in its outcome, when there are some."""

    # Read-only on purpose: what the actor gets is recorded in the outcome, never set on the proxy.
    @property
    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        opened = outcome_of(self).scratch.arguments
        return opened[0] if opened is not None else tuple(message_of(self).args)

    @property
    def kwargs(self) -> dict[str, Any]:  # type: ignore[override]
        opened = outcome_of(self).scratch.arguments
        return opened[1] if opened is not None else dict(message_of(self).kwargs)


class WorkQueue:
    """A worker's queue of messages waiting for a thread (Dramatiq keeps it as ``work_queue``)."""

    def __init__(self, worker: dramatiq.Worker) -> None:
        self._worker = worker

    @property
    def consumed(self) -> frozenset[str]:
        """The Dramatiq queue names the worker consumes."""
        return frozenset(self._worker.consumers)

    def runs_in(self, thread: object) -> bool:
        """Whether ``thread`` is one of the worker's threads."""
        return thread in self._worker.workers

    def longest_wait_s(self) -> float:
        """How long the delivery that waits longest for a thread has waited, in s (0 when none waits)."""
        queue = self._worker.work_queue
        with queue.mutex:
            first = queue.queue[0] if queue.queue else None
        return (time.monotonic_ns() - first._queued_time) / 1e9 if first is not None else 0.0

    def put_first(self, message: dramatiq.broker.MessageProxy) -> None:
        """Hand ``message`` to the worker's next free thread, ahead of what waits (there is nothing when
        local steps use it)."""
        from dramatiq.worker import _WorkQueueItem

        self._worker.work_queue.put(_WorkQueueItem(FIRST, message))

    def take_waiting(self) -> Iterator[dramatiq.broker.MessageProxy]:
        """Take what waits for a thread off the queue, one delivery at a time, until none is left (no
        thread starts them); each is counted done once the caller has dealt with it."""
        queue = self._worker.work_queue
        while True:
            try:
                item = queue.get_nowait()
            except Empty:
                return
            yield item.message
            queue.task_done()
