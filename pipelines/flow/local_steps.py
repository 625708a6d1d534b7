"""Local steps: a chain goes on in the worker where its last step finished (complete-and-claim).

When a worker finishes step N of a run and what follows is one step of an actor this worker process
runs, the script that records N's result also claims N+1 for this worker, in the same call. N+1 then
runs next in this process, through the same middleware as a delivered message: no publish, confirm,
delivery or ack for that hop, one store round trip per step. (Temporal's local activities are the model.)

A hop still goes through RabbitMQ when what follows is a fan-out (one publish the exchange copies), an
actor on a Dramatiq queue this process does not consume, an ordered, long-running, fire-and-forget,
rate-limited or prioritised actor, one declared ``local_steps=False``, a step with an ``eta``; and
whenever a delivery has waited in this process for a thread longer than :data:`LOCAL_WAIT_LIMIT_S`, or
a chain of local steps has run here for :data:`LOCAL_BUDGET_S` (RabbitMQ's deliveries are never starved
by a long chain).

Nothing of a local step is in RabbitMQ. Its claim's lease is held by the process's heartbeat like any
step's; when the worker dies, the lease lapses, and the lapse sweep (``pipelines.flow.stall_sweep``)
finds it in the run store's index of local steps and publishes it again: within ``store.step_lease_s``
and one sweep interval of the kill.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import dramatiq
import orjson

from pipelines import options as opt
from pipelines.broker.common import PipelineBroker
from pipelines.flow.step_messages import StepInput, step_messages
from pipelines.handling.holds import Holds
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.profiles.kinds import profile_of
from pipelines.store.base import Advance, LocalOffer
from pipelines.wire.codec import decode_value
from pipelines.wire.steps import Leaf, StepAddress

if TYPE_CHECKING:
    from pipelines.flow.starting import RunListener

#: How many trace links a chord callback carries at most (as when it is published).
MAX_TRACE_LINKS = 128

logger = logging.getLogger(__name__)

#: Longest a chain of local steps runs in one process before its next step goes through RabbitMQ, in s.
LOCAL_BUDGET_S = 10.0
#: Longest a delivery may have waited for a thread for the next step to still run here, in s. Under load,
#: deliveries always wait in a worker (it takes a few ahead, Dramatiq's prefetch): each waits its turn
#: among them, and a local step goes first only while none has waited longer than this.
LOCAL_WAIT_LIMIT_S = 0.5
#: Profiles whose steps always go through RabbitMQ (their queues are what they are for).
ROUTED_PROFILES = frozenset({"ordered", "long_running", "fire_and_forget"})


class WorkQueue(Protocol):
    """Where a worker hands messages to its threads (``pipelines.handling.proxy.WorkQueue``)."""

    @property
    def consumed(self) -> frozenset[str]: ...

    def runs_in(self, thread: object) -> bool: ...

    def longest_wait_s(self) -> float: ...

    def put_first(self, message: dramatiq.broker.MessageProxy) -> None: ...


class LocalSteps:
    """Offers this worker for the step that follows, and runs it here when the store claimed it so."""

    def __init__(
        self,
        *,
        broker: PipelineBroker,
        holds: Holds,
        work: WorkQueue,
        listeners: Sequence[RunListener] = (),
    ) -> None:
        self.broker = broker
        self.holds = holds
        self.work = work
        self.listeners = listeners
        self._actors: tuple[int, str] = (-1, "")

    def offer(self, message: dramatiq.broker.MessageProxy) -> LocalOffer | None:
        """What to offer the store with ``message``'s completion (None: what follows goes through RabbitMQ)."""
        if self.work.longest_wait_s() > LOCAL_WAIT_LIMIT_S:
            return None
        if isinstance(message, LocalDelivery) and message.local_for_s > LOCAL_BUDGET_S:
            return None
        actors = self._eligible()
        if actors == " ":
            return None
        return LocalOffer(actors=actors, lease_ms=int(self.holds.lease_s * 1000))

    def _eligible(self) -> str:
        """The names of the actors whose steps may run here, as the store takes them (see ``LocalOffer``);
        worked out again when actors are declared."""
        actors = self.broker.actors
        count, names = self._actors
        if count != len(actors):
            consumed = self.work.consumed
            chosen = sorted(name for name, actor in list(actors.items()) if consumed and _local(actor, consumed))
            names = " " + " ".join(chosen) + " "
            self._actors = (len(actors), names)
        return names

    def start(
        self,
        message: dramatiq.broker.MessageProxy,
        address: StepAddress,
        advance: Advance,
        *,
        trace: dict[str, str],
    ) -> None:
        """Run the step the store claimed for this worker next, in this process (``advance`` is ``local``);
        ``trace`` is the W3C trace context of the step that finished (its span is the next one's parent)."""
        assert advance.leaves_json is not None
        assert advance.value_json is not None
        assert advance.claim is not None
        [leaf] = [Leaf.from_json(data) for data in orjson.loads(advance.leaves_json)]
        pipeline = str(message.options.get(opt.PIPELINE) or "adhoc")
        given = StepInput((decode_value(advance.value_json),))
        [next_message] = step_messages([leaf], run_id=address.run_id, pipeline=pipeline, given=given)
        _carry_context(message, next_message, advance, trace)
        hold = self.holds.step(address.run_id, leaf.node, advance.claim)
        made = next_message.options[opt.STEP]
        try:
            prepared = self.broker.prepare(next_message)
        except Exception:  # it cannot run here: published as a hop, it runs once its claim's lease lapses
            logger.exception("Could not run step %s of run %s here; publishing it.", leaf.node, address.run_id)
            self.holds.release(hold)
            self.broker.enqueue(next_message)
            return
        if prepared.options.get(opt.STEP) is made:  # its address is known: the thread that runs it need not parse it
            StepAddress(address.run_id, leaf.node, leaf.up).remember(made)
        started = message.chain_started if isinstance(message, LocalDelivery) else time.monotonic()
        self.work.put_first(
            LocalDelivery(prepared, holds=self.holds, hold=hold, after=address.node, chain_started=started)
        )
        for listener in self.listeners:
            listener.step_hopped(leaf.actor_name, local=True)


def _local(actor: dramatiq.Actor[Any, Any], consumed: frozenset[str]) -> bool:
    """Whether ``actor``'s steps may run where the step before them finished."""
    options = actor.options
    return (
        actor.queue_name in consumed
        and options.get(opt.LOCAL_STEPS, True) is not False
        and profile_of(actor) not in ROUTED_PROFILES
        and not options.get(opt.RATE_LIMIT)
        and not actor.priority
    )


def _carry_context(
    message: dramatiq.broker.MessageProxy,
    next_message: dramatiq.Message[Any],
    advance: Advance,
    carrier: dict[str, str],
) -> None:
    """What a publish would have stamped on the step: the correlation id, the trace context of the step
    that finished (``carrier``: the next step's span is its child in the run's one trace), a chord's member
    links."""
    correlation = message.options.get(opt.CORRELATION)
    if correlation is not None:
        next_message.options[opt.CORRELATION] = correlation
    if carrier:
        next_message.options[opt.TRACE] = carrier
    if advance.member_trace_parents:
        next_message.options[opt.TRACE_LINKS] = list(advance.member_trace_parents[:MAX_TRACE_LINKS])
