"""Runs each pipeline step once per run and advances the run when a step ends.

Before a step runs, its claim in the run store decides: run it, skip it (the run ended, or this is a
duplicate of a finished step, whose continuation is re-driven if it never started), or put it off
(another worker holds its lease). After it ran, the result is recorded and what follows is published;
a failure is recorded, and fails the run once the retries are exhausted. Must come before ``Backoff``
in the middleware list, so that its ``after_process_message`` sees whether the failure was final.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from pipelines.broker.common import pipeline_broker
from pipelines.deferral import put_off, put_off_while_store_down
from pipelines.errors import (
    Cancelled,
    DefinitionError,
    PipelinesError,
    PublishError,
    ResultTooLarge,
    ServiceUnavailable,
)
from pipelines.outcome import fail_message, outcome_of
from pipelines.plan import StepAddress
from pipelines.runtime import Runtime

logger = logging.getLogger(__name__)

#: Longest a copy of a step held by another worker waits before it looks again, in ms.
BUSY_RECHECK_MS = 30_000

_in_step: contextvars.ContextVar[bool] = contextvars.ContextVar("in_pipeline_step", default=False)


class _StepResultWarning(logging.Filter):
    """Drops Dramatiq's "returned a value ... discarded" warning for pipeline steps: their results are kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_in_step.get() and "returned a value that is not None" in record.getMessage())


class PipelineSteps(Middleware):
    """Claims, completes and fails pipeline steps through the runtime (see the module docstring)."""

    def __init__(self, *, runtime: Runtime) -> None:
        self.runtime = runtime

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        worker_logger = logging.getLogger("dramatiq.worker.WorkerThread")
        if not any(isinstance(f, _StepResultWarning) for f in worker_logger.filters):
            worker_logger.addFilter(_StepResultWarning())

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        address = StepAddress.of(message)
        if address is None:
            return
        try:
            claim = self.runtime.claim(message, address)
        except ServiceUnavailable as e:
            put_off_while_store_down(broker, message, e)
            raise SkipMessage from None
        if claim.kind == "run":
            _in_step.set(True)
            return
        if claim.kind == "busy":
            put_off(broker, message, min(claim.wait_ms, BUSY_RECHECK_MS), "another worker holds its lease")
        elif claim.kind == "done":
            outcome_of(message).duplicate = True
            self._redrive(broker, message, address)
        elif claim.kind == "missing":
            logger.error(
                "Step %s of run %s is not in the run store (expired or never created); dead-lettering %s.",
                address.node,
                address.run_id,
                message.message_id,
            )
            fail_message(message, "run or step not in the run store")
        else:
            logger.info("Skipping step %s: run %s is %s.", address.node, address.run_id, claim.run_state)
        raise SkipMessage

    def _redrive(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, address: StepAddress) -> None:
        try:
            self.runtime.redrive(pipeline_broker(broker), message, address)
        except PipelinesError:
            logger.exception("Could not re-drive step %s of run %s; dead-lettering.", address.node, address.run_id)
            fail_message(message, "could not advance the run")

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        address = StepAddress.of(message)
        if address is None:
            return
        _in_step.set(False)
        try:
            if isinstance(exception, Cancelled):
                self.runtime.stopped(address, exception)
            elif exception is not None:
                self.runtime.fail(message, address, exception, final=message.failed)
            else:
                self._complete(broker, message, address, result)
        except (ServiceUnavailable, PublishError):
            # The result may be recorded but what follows was not published: keep the message
            # (dead-lettered); a replay re-drives the continuation without running the step again.
            logger.exception("Could not advance run %s after step %s; dead-lettering.", address.run_id, address.node)
            fail_message(message, "could not advance the run")

    def _complete(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        result: Any,
    ) -> None:
        try:
            self.runtime.complete(pipeline_broker(broker), message, address, result)
        except (ResultTooLarge, DefinitionError) as e:
            logger.error("Step %s of run %s failed: %s", address.node, address.run_id, e)
            self.runtime.fail(message, address, e, final=True)
            fail_message(message, "permanent error", e)
