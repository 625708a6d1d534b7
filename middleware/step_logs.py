"""Keeps the log records each pipeline step emits while it runs, with the step in the run store.

A step claimed by ``PipelineSteps`` starts capturing what its thread logs
(:mod:`pipelines.handling.step_logs`: the newest records within the store's bounds, secrets
masked); when it ends, the records go to the outcome's scratch, and ``PipelineSteps`` keeps them with
the step's result or failure, in the same round trip. Comes right after ``PipelineSteps``: its
``before_process_message`` runs once the step is claimed, and its ``after_process_message`` just before
the step's end is recorded, after the later middleware logged what they decided (a retry, say).
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from pipelines.handling import step_logs
from pipelines.handling.outcome import outcome_of


class StepLogs(Middleware):
    """Captures a step's log records while it runs (see the module docstring); ``max_records`` 0: none."""

    #: Observability: its failures are logged and never stop a message (see ``pipelines.handling.guards``).
    fails_open = True

    def __init__(self, *, max_records: int, max_bytes: int) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self.max_records:
            step_logs.install()

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        hold = outcome_of(message).scratch.step_hold
        if hold is not None and self.max_records:
            step_logs.start(attempt=hold.claim, max_records=self.max_records, max_bytes=self.max_bytes)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        outcome_of(message).scratch.step_log = step_logs.stop()

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        step_logs.stop()
