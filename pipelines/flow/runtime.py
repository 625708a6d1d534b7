"""Advancing runs as their steps end; starting them is ``pipelines.flow.starting``.

The worker side (called by the ``PipelineSteps`` middleware) claims a step before it runs, and when it
ends records the result and publishes what follows, with one store round trip for the claim and one for
the decision (barrier and next step together), and one confirmed publish, or none when the next step
runs here (``pipelines.flow.local_steps``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dramatiq
import orjson
from opentelemetry import trace

from pipelines import options as opt
from pipelines.broker.common import PipelineBroker
from pipelines.context import worker_id
from pipelines.errors import (
    ClaimLost,
    ResultTooLarge,
    ServiceUnavailable,
    error_name,
)
from pipelines.flow.local_steps import LocalSteps
from pipelines.flow.starting import RunListener
from pipelines.flow.starting_in_transaction import StartsInTransaction
from pipelines.flow.step_messages import StepInput, step_messages
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.payloads.sealing import SealedFor, encrypts
from pipelines.store.base import Advance, Claim
from pipelines.store.step_history import AttemptLog
from pipelines.wire import option_values as wire_options
from pipelines.wire import trace_context
from pipelines.wire.codec import decode_value, encode_value
from pipelines.wire.steps import Leaf, StepAddress

__all__ = ["RunListener", "Runtime", "StepInput", "step_messages"]

logger = logging.getLogger(__name__)

#: Most members a chord callback's span links to: the OpenTelemetry SDK's default link limit, and
#: what keeps the callback message of a chord with thousands of members small.
MAX_TRACE_LINKS = 128

#: What a worker logs when an attempt's end finds its step claimed again (step, run, message id).
_END_LOST = (
    "Step %s of run %s was claimed again after its lease lapsed here: this attempt's end of %s is not recorded "
    "(the other attempt's is)."
)
_FAILURE_OVERTAKEN = (
    "Step %s of run %s was claimed again (by this attempt's retry, or after its lease lapsed here): the failure "
    "of %s ends only its own attempt in the step's history."
)


class Runtime(StartsInTransaction):
    """Starts runs (:class:`~pipelines.flow.starting.RunStarts`, also in the caller's transaction) and
    advances them as their steps end; holds no state of its own beyond the store. With a ``tracer``, each
    completed step passes its trace parent to the store, so a chord callback can link to the spans of all
    its members.
    """

    def claim(self, message: dramatiq.broker.MessageProxy, address: StepAddress) -> Claim:
        """May this message's step run now? (See :class:`~pipelines.store.base.Claim`.) The step's record
        names this worker (:func:`~pipelines.context.worker_id`) when it may.

        Raises:
            AddressNotInPlan: The message's actor or address is not its run's stored plan's.
        """
        attempt = wire_options.attempt(message.options)
        return self.store.claim_step(
            address.run_id,
            address.node,
            attempt=attempt,
            lease_ms=self.lease_ms,
            worker=worker_id(),
            actor=message.actor_name,
            up=address.up,
        )

    def complete(
        self,
        broker: PipelineBroker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        result: Any,
        *,
        claim: int | None = None,
    ) -> Advance:
        """Record a step's result and publish what follows it (:meth:`result_json`, then :meth:`advance`).

        Raises:
            ResultTooLarge: The result is over ``store.max_result_bytes`` (nothing is recorded).
        """
        value = self.result_json(broker, message, address, result)
        return self.advance(broker, message, address, value, claim=claim)

    def result_json(
        self, broker: PipelineBroker, message: dramatiq.broker.MessageProxy, address: StepAddress, result: Any
    ) -> str:
        """A step's result as it is recorded: sealed if its actor encrypts, as JSON, within the size limit.

        Raises:
            ResultTooLarge: The result is over ``store.max_result_bytes``.
            DefinitionError: The result is not JSON.
        """
        actor = broker.actors.get(message.actor_name)
        if self.sealer is not None and actor is not None and encrypts(actor):
            result = self.sealer.seal(result, SealedFor(run=address.run_id))
        value = encode_value(result)
        if len(value) > self.max_result_bytes:
            raise ResultTooLarge(
                f"Step {address.node} ({message.actor_name}) returned {len(value)} bytes, over "
                f"store.max_result_bytes = {self.max_result_bytes}. Return an id or a URL, not the data."
            )
        return value

    def advance(
        self,
        broker: PipelineBroker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        value_json: str,
        *,
        claim: int | None = None,
        local: LocalSteps | None = None,
        logs: AttemptLog | None = None,
    ) -> Advance:
        """Record a step's result (JSON, from :meth:`result_json`) and publish what follows it; ``claim``
        is the claim the attempt ran under (``lost``: it was claimed again since, nothing is recorded).
        With ``local``, what follows runs here instead when it can (``pipelines.flow.local_steps``);
        ``logs``, what the attempt logged, is kept with the step.

        Raises:
            ServiceUnavailable: The store (or the broker) did not answer.
            PublishError: What follows was not published (the result is recorded: do it again to re-drive).
        """
        carried = trace_context.carrier(trace.get_current_span().get_span_context())
        advance = self.store.complete_step(
            address.run_id,
            address.node,
            address.up,
            value_json,
            trace_parent=carried.get("traceparent", "") if self.tracer is not None else "",
            claim=claim,
            local=local.offer(message) if local is not None else None,
            local_after=message.after if isinstance(message, LocalDelivery) else None,
            worker=worker_id(),
            logs=logs,
        )
        if advance.kind == "lost":
            self.lost(message, address)
        elif advance.kind == "missing":
            logger.warning(
                "Step %s of run %s ended, but its run is not in the run store (it expired, or the store lost "
                "its data): its result is not recorded and nothing follows. Start the run again.",
                address.node,
                address.run_id,
            )
        self._follow(broker, message, address, advance)
        if advance.kind == "local":
            assert local is not None
            local.start(message, address, advance, trace=carried)
        return advance

    def lost(self, message: dramatiq.broker.MessageProxy, address: StepAddress, *, failed: bool = False) -> None:
        """An attempt ended after its step was claimed again (its lease had lapsed, or, for a failure, its
        retry claimed it first): the other attempt decides the step; a failure ends only its own entry."""
        logger.warning(_FAILURE_OVERTAKEN if failed else _END_LOST, address.node, address.run_id, message.message_id)
        for listener in self.listeners:
            listener.step_lost(message.actor_name)

    def redrive(self, broker: PipelineBroker, message: dramatiq.broker.MessageProxy, address: StepAddress) -> Advance:
        """Publish again what follows a step that already succeeded, if it never started."""
        advance = self.store.complete_step(address.run_id, address.node, address.up, None)
        self._follow(broker, message, address, advance)
        return advance

    def _follow(
        self,
        broker: PipelineBroker,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        advance: Advance,
    ) -> None:
        pipeline = wire_options.pipeline(message.options) or "adhoc"
        if advance.chord_wait_ms is not None:
            for listener in self.listeners:
                listener.chord_released(pipeline, advance.chord_wait_ms / 1000)
        if advance.kind == "done" and advance.run_created_at_ms is not None:
            for listener in self.listeners:
                listener.run_finished(pipeline, "succeeded", time.time() - advance.run_created_at_ms / 1000)
        if advance.kind != "start":
            return
        assert advance.leaves_json is not None
        assert advance.value_json is not None
        leaves = [Leaf.from_json(data) for data in orjson.loads(advance.leaves_json)]
        given = StepInput((decode_value(advance.value_json),))
        messages = step_messages(leaves, run_id=address.run_id, pipeline=pipeline, given=given)
        if advance.member_trace_parents:
            for next_message in messages:
                next_message.options[opt.TRACE_LINKS] = list(advance.member_trace_parents[:MAX_TRACE_LINKS])
        broker.enqueue_many(messages)
        for next_message in messages:
            for listener in self.listeners:
                listener.step_hopped(next_message.actor_name, local=False)

    def stopped(self, address: StepAddress, error: BaseException) -> None:
        """A step stopped at a cancellation check: if its run was cancelled, it will not finish (shown
        as skipped). If instead its job runs again elsewhere (a lease taken over), that attempt records it."""
        try:
            if self.store.run_state(address.run_id) == "cancelled":
                self.store.fail_step(address.run_id, address.node, f"{type(error).__name__}: {error}", final=False)
        except ServiceUnavailable as e:  # only how the step is shown is at stake
            logger.warning("Could not record that step %s of run %s stopped: %s", address.node, address.run_id, e)

    def fail(
        self,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        error: BaseException,
        *,
        final: bool,
        claim: int | None = None,
        logs: AttemptLog | None = None,
    ) -> None:
        """Record a failed attempt (and ``logs``, what it logged); a final one fails the run with ``error``
        recorded. An attempt that lost its ``claim`` (its retry, or another worker, claimed the step since) ends
        only its own entry in the step's history, and keeps its logs."""
        text = f"{error_name(error)}: {error}"
        try:
            created_at_ms = self.store.fail_step(
                address.run_id, address.node, text, final=final, claim=claim, logs=logs
            )
        except ClaimLost:
            self.lost(message, address, failed=True)
            return
        if created_at_ms is not None:
            pipeline = wire_options.pipeline(message.options) or "adhoc"
            for listener in self.listeners:
                listener.run_finished(pipeline, "failed", time.time() - created_at_ms / 1000)
