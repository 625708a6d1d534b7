"""Dramatiq's message proxy and its worker's work queue, as the framework reads them: in this one module.

Dramatiq's ``MessageProxy`` wraps the message a consumer delivered (``_message``, no public name) and,
after a failure, the exception the actor raised (``_exception``); it settles a delivery by its public
``failed`` flag. Its worker hands deliveries to its threads through a priority queue of its items
(``_WorkQueueItem``), where a local step goes too, and from which a stopping worker's deliveries that no
thread started are taken back (:class:`WorkQueue`). A worker thread logs through its own ``logger``
attribute, which :func:`drop_thread_warnings` wraps. Every other module goes through what is here.

Our brokers' deliveries are :class:`DeliveredMessage` s: the arguments an actor is called with are the
ones ``Payloads`` recorded in the outcome (sealed values opened, a typed payload validated), while the
message itself keeps its wire form for a retry or a dead letter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
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
    """A delivery whose actor gets the arguments recorded in its outcome, when there are some.

    The message's fields every hook reads are attributes of its own: Dramatiq's proxy looks each read up
    through ``__getattr__`` (some fifty a step). The message is never replaced, and its fields never
    change (``options`` is the message's own dict, changed in place where it is)."""

    def __init__(self, message: dramatiq.Message[Any]) -> None:
        super().__init__(message)
        self.options = message.options
        self.actor_name = message.actor_name
        self.queue_name = message.queue_name
        self.message_id = message.message_id
        self.message_timestamp = message.message_timestamp

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
        """Queue ``message`` ahead of what waits, for the thread that puts it: no idle thread is woken (one
        would wake only to find it gone, as this thread takes it as soon as it is done with the message it
        runs). Should this thread be held up, an idle one finds it at the end of its wait for work
        (Dramatiq's worker timeout, a second by default)."""
        from dramatiq.worker import _WorkQueueItem

        queue = self._worker.work_queue
        with queue.mutex:  # Queue.put without its notify
            queue._put(_WorkQueueItem(FIRST, message))
            queue.unfinished_tasks += 1

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


class _WorkerThreadLog:
    """A worker thread's logger that drops the warnings ``dropped`` names before a record is made of them."""

    def __init__(self, logger: logging.Logger, dropped: Callable[[str], bool]) -> None:
        self._logger = logger
        self._dropped = dropped
        self.debug = logger.debug
        self.info = logger.info
        self.error = logger.error
        self.exception = logger.exception
        self.critical = logger.critical

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if not self._dropped(msg):
            self._logger.warning(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


def drop_thread_warnings(worker: dramatiq.Worker, dropped: Callable[[str], bool]) -> None:
    """Drop the warnings of ``worker``'s threads that ``dropped`` names (it gets their message), before
    their records are made: a filter on the logger would drop them only after (Dramatiq's warning of a
    result without a results backend comes with every pipeline step that returns a value)."""
    for thread in worker.workers:
        log = thread.logger
        if not isinstance(log, _WorkerThreadLog):
            thread.logger = _WorkerThreadLog(log, dropped)
