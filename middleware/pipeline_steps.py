"""Runs each pipeline step once per run and advances the run when a step ends.

Before a step runs, its claim in the run store decides: run it, skip it (the run ended, or this is a
duplicate of a finished step, whose continuation is re-driven if it never started), or put it off
(another worker holds its lease). After it ran, the result is recorded and what follows is published;
a failure is recorded, and fails the run once the retries are exhausted.

Recording survives a store that stalls or fails for a while (``pipelines.handling.recording``): it is tried
again for up to ``RECORD_RETRY_S`` (within the step's lease), and if it still cannot be done the result
travels with a copy of the message, put off in the delay queues: that copy records the result and
advances the run without running the actor again (``pipeline_result``), as often as needed until the
store answers. A dead letter of such a copy keeps the result too, so its replay records it. A final failure
that cannot be recorded travels the same way (``pipeline_failure``): the copy records it, failing the
run, and is then dead-lettered with it, so no run is left running for want of its record. Must come before ``Backoff``
in the middleware list, so that its ``after_process_message`` sees whether the failure was final.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from pipelines import options as opt
from pipelines.broker.common import pipeline_broker
from pipelines.errors import (
    Cancelled,
    CarriedFailure,
    DefinitionError,
    PipelinesError,
    PublishError,
    ResultTooLarge,
    RunNotInStore,
    ServiceUnavailable,
    error_name,
)
from pipelines.flow.deadlines import DEADLINE_CHECK, DEADLINE_QUEUE, check_deadline
from pipelines.flow.local_steps import LocalSteps
from pipelines.flow.own_actors import LEFT_UNDONE
from pipelines.flow.runtime import Runtime
from pipelines.handling.deferral import STORE_DOWN_RETRY_DELAY_MS, put_off, put_off_while_store_down
from pipelines.handling.holds import Hold, Holds
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.outcome import fail_message, outcome_of
from pipelines.handling.proxy import WorkQueue, drop_thread_warnings, let_go
from pipelines.handling.recording import carry, record_within_lease
from pipelines.middleware.max_age import MAX_AGE_EXCEEDED
from pipelines.middleware.payloads import UNUSABLE_ARGUMENTS
from pipelines.store import step_transaction
from pipelines.store.roles import StepProgress
from pipelines.wire import option_values as wire_options
from pipelines.wire.steps import AddressNotInPlan, StepAddress

logger = logging.getLogger(__name__)

#: Longest a copy of a step held by another worker waits before it looks again, in ms.
BUSY_RECHECK_MS = 30_000

_in_step: contextvars.ContextVar[bool] = contextvars.ContextVar("in_pipeline_step", default=False)


def _step_result_warning(message: str) -> bool:
    """Whether a worker thread's warning is Dramatiq's "returned a value ... discarded" of a pipeline step
    (its result is kept: the warning would be wrong)."""
    return _in_step.get() and "returned a value that is not None" in message


class PipelineSteps(Middleware):
    """Claims, completes and fails pipeline steps through the runtime (see the module docstring)."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        store: StepProgress,
        holds: Holds,
        system_timeout_s: float,
        local_steps: bool = True,
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.holds = holds
        self.system_timeout_s = system_timeout_s
        self.local_steps = local_steps
        self._local: dict[int, LocalSteps] = {}
        """By worker: runs a chain's next step in the worker where the step before it finished (one per
        worker this broker's process runs, found from the thread that finished the step)."""

    @property
    def actor_options(self) -> set[str]:
        return {opt.LOCAL_STEPS}

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        if DEADLINE_CHECK in broker.actors:
            return
        steps_broker = pipeline_broker(broker)

        def check(run_id: str) -> None:
            check_deadline(steps_broker, self.store, run_id)

        declare = dramatiq.actor(
            broker=broker,
            actor_name=DEADLINE_CHECK,
            queue_name=DEADLINE_QUEUE,
            max_retries=20,
            timeout_s=self.system_timeout_s,
        )
        declare(check)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self.local_steps:
            self._local[id(worker)] = LocalSteps(
                broker=pipeline_broker(broker),
                holds=self.holds,
                work=WorkQueue(worker),
                listeners=self.runtime.listeners,
            )
        drop_thread_warnings(worker, _step_result_warning)
        chosen = worker.consumer_whitelist
        if chosen and DEADLINE_QUEUE not in chosen and DEADLINE_CHECK in broker.actors:
            logger.warning(
                "This worker reads --queues %s, not %r, the queue of the framework's own actors: unless another "
                "worker reads it, %s. Add %r to --queues, or run a worker that reads it.",
                " ".join(sorted(chosen)),
                DEADLINE_QUEUE,
                LEFT_UNDONE,
                DEADLINE_QUEUE,
            )

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        address = StepAddress.of(message)
        if address is None:
            return
        carried = wire_options.step_result(message.options)
        if carried is not None:
            try:
                self._record(broker, message, address, carried)
            except AddressNotInPlan as e:
                _fail_outside_plan(message, e)
            raise SkipMessage
        failure = wire_options.step_failure(message.options)
        if failure is not None:
            self._record_failure(broker, message, address, *failure)
            raise SkipMessage
        if isinstance(message, LocalDelivery):  # claimed with the completion of the step before it
            _in_step.set(True)
            step_transaction.step_began(self.runtime.store)
            outcome_of(message).scratch.step_hold = message.hold
            return
        try:
            claim = self.runtime.claim(message, address)
        except ServiceUnavailable as e:
            put_off_while_store_down(broker, message, e)
            raise SkipMessage from None
        except AddressNotInPlan as e:
            _fail_outside_plan(message, e)
            raise SkipMessage from None
        if claim.kind == "run":
            _in_step.set(True)
            step_transaction.step_began(self.runtime.store)
            outcome_of(message).scratch.step_hold = self.holds.step(address.run_id, address.node, claim.attempt)
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
            error = RunNotInStore(
                f"Step {address.node} of run {address.run_id} is not in the run store: the run expired, was never "
                "created, or the store lost its data. Start the run again."
            )
            fail_message(message, "run or step not in the run store", error)
        else:
            logger.info("Skipping step %s: run %s is %s.", address.node, address.run_id, claim.run_state)
        raise SkipMessage

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._local.pop(id(worker), None)

    def _local_here(self) -> LocalSteps | None:
        """The local steps of the worker whose thread this is (None outside a worker's threads)."""
        thread = threading.current_thread()
        return next((local for local in self._local.values() if local.work.runs_in(thread)), None)

    def _release(self, message: dramatiq.broker.MessageProxy) -> Hold | None:
        """Stop renewing the lease of the step this delivery claimed (if it claimed one)."""
        scratch = outcome_of(message).scratch
        hold, scratch.step_hold = scratch.step_hold, None
        if hold is not None:
            self.holds.release(hold)
        return hold

    def _redrive(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, address: StepAddress) -> None:
        try:
            self.runtime.redrive(pipeline_broker(broker), message, address)
        except AddressNotInPlan as e:
            _fail_outside_plan(message, e)
        except PipelinesError:
            logger.exception("Could not re-drive step %s of run %s; dead-lettering.", address.node, address.run_id)
            fail_message(message, "could not advance the run")

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._release(message)
        step_transaction.step_ended()
        # A step past its max_age, or whose arguments cannot be opened or validated, never reached its
        # claim (``MaxAge`` and ``Payloads`` come first): its run fails here, naming it, rather than
        # waiting for a step that will never run.
        address = StepAddress.of(message)
        outcome = outcome_of(message)
        failure = outcome.settlement.failure
        never_claimed = failure == MAX_AGE_EXCEEDED or failure in UNUSABLE_ARGUMENTS
        if address is not None and never_claimed and outcome.settlement.failure_error is not None:
            self.runtime.fail(message, address, outcome.settlement.failure_error, final=True)

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
        hold = self._release(message)
        claim = hold.claim if hold is not None else None
        logs = outcome_of(message).scratch.step_log
        if exception is not None:
            step_transaction.step_ended()  # the actor's writes roll back with its failure
        try:
            if isinstance(exception, Cancelled):
                self.runtime.stopped(address, exception)
            elif exception is not None:
                self.runtime.fail(message, address, exception, final=message.failed, claim=claim, logs=logs)
            else:
                self._complete(broker, message, address, result, hold)
        except AddressNotInPlan as e:
            _fail_outside_plan(message, e)
        except (ServiceUnavailable, PublishError):
            if exception is not None and not message.failed:
                # The retry Backoff scheduled claims the step as its next attempt: nothing is stranded.
                logger.warning("Could not record a failed attempt of step %s of run %s.", address.node, address.run_id)
                return
            if exception is None:
                # A result not recorded nor carried (its copy could not be put off): dead-lettered with it.
                logger.exception(
                    "Could not advance run %s after step %s; dead-lettering.", address.run_id, address.node
                )
                fail_message(message, "could not advance the run")
                return
            self._carry_failure(broker, message, address, outcome_of(message).settlement.failure_error or exception)
        finally:
            step_transaction.step_ended()

    def _complete(
        self,
        broker: dramatiq.broker.Broker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        result: Any,
        hold: Hold | None,
    ) -> None:
        claim = hold.claim if hold is not None else None
        try:
            value = self.runtime.result_json(pipeline_broker(broker), message, address, result)
        except (ResultTooLarge, DefinitionError) as e:
            logger.error("Step %s of run %s failed: %s", address.node, address.run_id, e)
            self.runtime.fail(message, address, e, final=True, claim=claim, logs=outcome_of(message).scratch.step_log)
            fail_message(message, "permanent error", e)
            return

        def advance() -> None:
            self.runtime.advance(
                pipeline_broker(broker),
                message,
                address,
                value,
                claim=claim,
                local=self._local_here(),
                logs=outcome_of(message).scratch.step_log,
            )

        if step_transaction.holding():
            self._complete_in_transaction(broker, message, address, advance, claim)
            return
        try:
            record_within_lease(
                advance,
                lease_end=hold.lease_end if hold is not None else 0.0,
                what=f"step {address.node} of run {address.run_id}",
            )
        except (ServiceUnavailable, PublishError) as e:
            why = f"the result of step {address.node} of run {address.run_id} could not be recorded yet ({e})"
            carry(broker, message, opt.STEP_RESULT, value, why)

    def _complete_in_transaction(
        self,
        broker: dramatiq.broker.Broker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        advance: Callable[[], None],
        claim: int | None,
    ) -> None:
        """Complete a step whose actor wrote in the step's transaction (``pipelines.transaction()``): its
        completion (``advance``) commits those writes. Tried once: if the store does not answer, nothing may
        have committed, so the step is put off and claimed again (it runs again only if nothing committed)."""
        try:
            advance()
        except (ServiceUnavailable, PublishError) as e:
            put_off_while_store_down(broker, message, e)
        except (AddressNotInPlan, PipelinesError):
            raise
        except Exception as e:  # the commit refused (a deferred constraint): the step fails, its writes undone
            logger.error("Step %s of run %s could not commit its transaction: %s", address.node, address.run_id, e)
            self.runtime.fail(message, address, e, final=True, claim=claim, logs=outcome_of(message).scratch.step_log)
            fail_message(message, "the step's transaction could not commit", e)

    def _carry_failure(
        self,
        broker: dramatiq.broker.Broker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        error: BaseException,
    ) -> None:
        """A final failure the store could not record: a copy put off carries it, so that its next delivery
        records it (the run fails) and is dead-lettered then, instead of a dead letter now and a run left
        running. If the copy cannot be put off either, this delivery is dead-lettered with the failure."""
        outcome = outcome_of(message)
        reason = outcome.settlement.failure or "retries exhausted"
        failure = {"reason": reason, "error_type": error_name(error), "error": str(error)}
        why = f"the failure of step {address.node} of run {address.run_id} could not be recorded yet"
        carry(broker, message, opt.STEP_FAILURE, failure, why)
        if outcome.deferred:
            let_go(message)  # the copy carries the failure

    def _record_failure(
        self,
        broker: dramatiq.broker.Broker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        reason: str,
        failure: CarriedFailure,
    ) -> None:
        """Record a final failure a message carries (its step failed already), then dead-letter it with
        that failure; put it off again while the store does not answer."""
        try:
            self.runtime.fail(message, address, failure, final=True)
        except (ServiceUnavailable, PublishError) as e:
            put_off(broker, message, STORE_DOWN_RETRY_DELAY_MS, f"its failure could not be recorded yet ({e})")
            return
        logger.info(
            "Recorded the failure %s carried for step %s of run %s.", message.message_id, address.node, address.run_id
        )
        fail_message(message, reason, failure)

    def _record(
        self, broker: dramatiq.broker.Broker, message: dramatiq.broker.MessageProxy, address: StepAddress, value: str
    ) -> None:
        """Record a result a message carries (its step ran already) and advance the run; put it off again
        while the store (or the broker) does not answer."""
        try:
            self.runtime.advance(pipeline_broker(broker), message, address, value)
        except (ServiceUnavailable, PublishError) as e:
            put_off(broker, message, STORE_DOWN_RETRY_DELAY_MS, f"its result could not be recorded yet ({e})")
            return
        logger.info(
            "Recorded the result %s carried for step %s of run %s.", message.message_id, address.node, address.run_id
        )


def _fail_outside_plan(message: dramatiq.broker.MessageProxy, error: AddressNotInPlan) -> None:
    """Dead-letter a step message its run's plan does not know: it neither runs nor advances the run."""
    logger.error("Dead-lettering %s: %s", message.message_id, error)
    fail_message(message, "malformed message", error)
