"""Keeps alive the runs whose steps this worker runs, and sweeps for runs that nothing advances any more.

Each worker process has one thread that, every ``StallSweep.every_s``: touches the runs of the steps its
threads are running, so that a step longer than its lease (a long-running job, an actor with a long
timeout) is never taken for stalled, then sweeps if it is the first process to ask in this interval
(a mark in the run store), so the fleet sweeps once per interval whatever its size. The sweep itself is
``pipelines.flow.stall_sweep``. Comes right after ``PipelineSteps``, so only a step that claimed its run is kept
alive. The same thread takes its turn at the lapse sweep more often, every ``StallSweep.lapse_every_s``:
local steps whose worker died are published again within a lease and that interval.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Protocol

import dramatiq
from dramatiq.middleware import Middleware

from pipelines.broker.common import PipelineBroker, pipeline_broker
from pipelines.errors import ServiceUnavailable
from pipelines.flow.stall_sweep import StallSweep
from pipelines.store.roles import OnceMarks, StallChecks
from pipelines.wire.steps import StepAddress

logger = logging.getLogger(__name__)


class StallStore(StallChecks, OnceMarks, Protocol):
    """What the keep-alives and the sweep's turn need of the run store."""


class StalledRuns(Middleware):
    """Keeps running steps' runs alive and sweeps for stalled runs (see the module docstring)."""

    def __init__(self, *, sweep: StallSweep, store: StallStore) -> None:
        self.sweep = sweep
        self.store = store
        self._running: dict[int, str] = {}
        """id of a message proxy → the run of the step it runs, for the steps this process runs now."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._broker: PipelineBroker | None = None

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._broker = pipeline_broker(broker)
        self._stop.clear()
        threading.Thread(target=self._watch, name="pipelines-stall-sweep", daemon=True).start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        address = StepAddress.of(message)
        if address is not None:
            with self._lock:
                self._running[id(message)] = address.run_id

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        with self._lock:
            self._running.pop(id(message), None)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        with self._lock:
            self._running.pop(id(message), None)

    def _watch(self) -> None:
        due = time.monotonic() + self.sweep.every_s
        while not self._stop.wait(self.sweep.lapse_every_s):
            try:
                self.tick_lapsed()
                if time.monotonic() >= due:
                    due = time.monotonic() + self.sweep.every_s
                    self.tick()
            except ServiceUnavailable as e:
                logger.warning("Could not keep runs alive or sweep for stalled runs: %s", e)
            except Exception:  # the thread must live on: the next interval tries again
                logger.exception("The sweep for stalled runs failed; it runs again in %g s.", self.sweep.every_s)

    def tick_lapsed(self) -> None:
        """Sweep for local steps whose worker died, if no other process has in this interval."""
        every_s = self.sweep.lapse_every_s
        turn = f"lapse-sweep:{math.floor(time.time() / every_s)}"
        if self._broker is not None and self.store.mark_once(turn, retention_s=math.ceil(every_s) + 1):
            self.sweep.sweep_lapsed(self._broker)

    def tick(self) -> None:
        """Keep this process's runs alive; sweep if no other process has in this interval."""
        with self._lock:
            runs = set(self._running.values())
        if runs:
            self.store.keep_alive(runs)
        every_s = self.sweep.every_s
        turn = f"stall-sweep:{math.floor(time.time() / every_s)}"
        if self._broker is not None and self.store.mark_once(turn, retention_s=math.ceil(every_s) + 1):
            self.sweep.sweep(self._broker)
