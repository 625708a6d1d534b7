"""Each worker process's heartbeat in the run store: who it is, what it reads, what it runs and ran.

A thread records, every ``[worker] heartbeat_s``, the process's host, pid and parent pid (the processes
of one ``dramatiq`` command share it), its threads, the Dramatiq queues it reads, the messages it
processed and failed since it started, the messages it runs now (a pipeline step with its run and step
id), and per RabbitMQ queue the deliveries it holds unacknowledged (the broker's ``unacked``: a count
its consumers keep, no call per message). A process that missed three beats is gone; its record is kept
an hour, so a killed process shows as gone that long, while one that stops cleanly removes it. With
each beat it adds the messages it processed, failed and dead-lettered since the last one, per actor, to
the store's counts of their minute (``pipelines.store.counts``), plain messages and pipeline steps
alike. ``pipelines workers``, ``pipelines queues`` and the console's queues page read them, with or
without ``[metrics]``.
Observability only: a store that does not answer skips a beat, never a message.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq
from dramatiq.middleware import Middleware

from pipelines.context import process_id
from pipelines.errors import ServiceUnavailable
from pipelines.handling.outcome import outcome_of
from pipelines.store.base import WorkerBeat
from pipelines.store.counts import KEPT_AFTER_MINUTE_MS, MINUTE_MS, Tally
from pipelines.store.roles import MessageCounts, WorkerBeats
from pipelines.wire.steps import StepAddress

logger = logging.getLogger(__name__)

#: How long a process's last heartbeat is kept after it (a killed process shows as gone that long), in s.
KEPT_AFTER_LAST_BEAT_S = 3600


class WorkerRecords(WorkerBeats, MessageCounts, Protocol):
    """What a heartbeat writes: the process's beat and its message counts."""


class Heartbeat(Middleware):
    """Records this worker process's heartbeat in the run store (see the module docstring)."""

    #: Observability: its failures are logged and never stop a message (see ``pipelines.handling.guards``).
    fails_open = True

    def __init__(self, *, store: WorkerRecords, interval_s: float) -> None:
        self.store = store
        self.interval_s = interval_s
        self.processed = 0
        self.failed = 0
        self.tally = Tally()
        self._running: dict[int, tuple[str, float]] = {}
        """id of a message proxy → what it runs (``actor`` or ``actor run/step``), and since when (monotonic s)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: dramatiq.Worker | None = None
        self._unacked: Callable[[], dict[str, int]] | None = None
        """The broker's count of the deliveries held unacknowledged per queue (RabbitMQ's only)."""
        self._started_at_ms = 0
        self._thread: threading.Thread | None = None

    @property
    def worker_id(self) -> str:
        return process_id()

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._worker, self._started_at_ms = worker, int(time.time() * 1000)
        self._unacked = getattr(broker, "unacked", None)
        self._stop.clear()
        self.beat()  # at once: a worker shows as soon as it has booted
        self._thread = threading.Thread(target=self._beat, name="pipelines-worker-heartbeat", daemon=True)
        self._thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s)
        self.store_counts()  # what was counted since the last beat
        try:
            self.store.forget_worker(self.worker_id)
        except ServiceUnavailable as e:  # its record lapses on its own
            logger.warning("Could not remove this worker's heartbeat: %s", e)

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        address = StepAddress.of(message)
        what = message.actor_name if address is None else f"{message.actor_name} {address.run_id}/{address.node}"
        with self._lock:
            self._running[id(message)] = (what, time.monotonic())

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        with self._lock:
            _, started = self._running.pop(id(message), ("", time.monotonic()))
            self.processed += 1
            self.failed += exception is not None
        self.tally.processed(message.actor_name, time.monotonic() - started, failed=exception is not None)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        with self._lock:
            self._running.pop(id(message), None)

    def after_nack(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        if not outcome_of(message).settlement.drop:  # a fire-and-forget message is dropped, not dead-lettered
            self.tally.dead_lettered(message.actor_name)

    def record(self) -> WorkerBeat:
        """This process as its next heartbeat describes it."""
        worker = self._worker
        # Dramatiq's own delay queues (``.DQ``) are how it reads a queue, not one more queue read.
        # A copy: the worker adds consumers from its own threads (actors declared after it started).
        consumed = list(worker.consumers) if worker is not None else []
        queues = sorted(q for q in consumed if not q.endswith(".DQ"))
        with self._lock:
            running = tuple(sorted(what for what, _ in self._running.values()))
            processed, failed = self.processed, self.failed
        unacked = self._unacked() if self._unacked is not None else {}
        return WorkerBeat(
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            parent_pid=os.getppid(),
            threads=int(getattr(worker, "worker_threads", 1)),
            queues=tuple(queues),
            processed=processed,
            failed=failed,
            running=running,
            started_at_ms=self._started_at_ms,
            beat_at_ms=int(time.time() * 1000),
            unacked=unacked,
        )

    def beat(self) -> None:
        """Record the heartbeat now, and the counts since the last one (what the thread does each interval)."""
        try:
            self.store.beat(self.record(), keep_ms=KEPT_AFTER_LAST_BEAT_S * 1000)
        except ServiceUnavailable as e:
            logger.warning("Could not record this worker's heartbeat: %s", e)
            return
        self.store_counts()

    def store_counts(self) -> None:
        """Add the messages counted since the last beat to the store's minutes (put back if it does not answer)."""
        counted = self.tally.take()
        if not counted:
            return
        try:
            self.store.add_counts(counted, keep_ms=KEPT_AFTER_MINUTE_MS + MINUTE_MS)
        except ServiceUnavailable as e:
            self.tally.put_back(counted)
            logger.warning("Could not record this worker's message counts: %s", e)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # the thread must live on: the next interval tries again
                logger.exception("This worker's heartbeat failed; it beats again in %g s.", self.interval_s)
