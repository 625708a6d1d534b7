"""What is known and decided about one delivery, in one typed record that travels with it.

Middleware decide things about a message that others act on later: ``Backoff`` schedules a retry or
gives up, a claim skips a duplicate, ``DeadLetter`` writes the reason, and the broker settles the
delivery by those decisions while ``Metrics`` counts them. They share one :class:`MessageOutcome` per
delivery, reached with :func:`outcome_of`, instead of attributes set on the message proxy: the facts
the broker knew, the :class:`Settlement` (how the broker settles it), what was done with it (for the
metrics), and each middleware's :class:`Scratch` between its hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import dramatiq

    from pipelines.dead_letters.reasons import DeadLetterReason
    from pipelines.handling.holds import Hold
    from pipelines.progress import Job
    from pipelines.store.step_history import AttemptLog

#: Where a proxy keeps its outcome (in its own ``__dict__``: the proxy forwards unknown names to the message).
_SLOT = "_pipelines_outcome"


class KeyClaim(NamedTuple):
    """An idempotency key this delivery claimed, the holder token the claim was made with, and the hold
    that keeps its lease while the message runs."""

    key: str
    holder: str
    hold: Hold | None = None


@dataclass(slots=True)
class Settlement:
    """How the broker settles the delivery: what the middleware decided about its failure."""

    failure: str | None = None
    """Why it was failed on purpose ("retries exhausted", "permanent error", ...); None if not."""
    failure_error: BaseException | None = None
    """The error that failed it, when the worker did not see one (it was failed in a hook)."""
    attempts: int | None = None
    """How many times it ran, when its final failure was counted in its ``retries`` option already."""
    dead_letter: DeadLetterReason | None = None
    """The reason the broker publishes with the dead letter (set just before the rejection)."""
    drop: bool = False
    """A failed delivery is dropped (acknowledged and counted), not dead-lettered (fire-and-forget)."""
    requeue_in_place: bool = False
    """Settle by returning it to the head of its queue (an ordered actor's retry)."""


@dataclass(slots=True)
class Scratch:
    """What a middleware holds between its before and after hooks, each field one middleware's."""

    arguments: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    """The arguments the actor runs with (``Payloads``: sealed values opened, a payload validated),
    when they differ from the wire's; the message itself keeps its wire form."""
    time_limit_ms: float | None = None
    """The time limit it runs under (``Timeout``'s choice, enforced by ``ActorTimeLimit``), kept here and
    not in its options, so a retry or a replay runs under its actor's limit of that time."""
    job: Job | None = None
    """The running job (``Leases``): its run step, and its lease for a long-running actor."""
    step_hold: Hold | None = None
    """The claim of the step it runs and its lease, kept by the process's heartbeat (``PipelineSteps``)."""
    key_claim: KeyClaim | None = None
    """The idempotency key claimed before it ran (``Idempotency``), recorded or released after."""
    step_log: AttemptLog | None = None
    """What the step logged while it ran (``StepLogs``), kept with its end by ``PipelineSteps``."""


@dataclass(slots=True)
class MessageOutcome:
    """One delivery's facts, its settlement, what was done with it, and the middleware's scratch."""

    # What the broker knew when it delivered the message.
    queue: str | None = None
    """The RabbitMQ queue it arrived on (None in memory)."""
    delivery_count: int = 0
    """How many times RabbitMQ delivered it before (a quorum queue's count; 0 in memory)."""

    settlement: Settlement = field(default_factory=Settlement)

    # What was done with it, for the metrics.
    duplicate: bool = False
    """Skipped as a duplicate (its step, key or tick ran already)."""
    retry_scheduled: bool = False
    """A retry was scheduled (in the delay queues, or in place)."""
    deferred: bool = False
    """Put off: a copy was enqueued with a delay, and this delivery let go without running."""

    scratch: Scratch = field(default_factory=Scratch)


def outcome_of(message: dramatiq.broker.MessageProxy) -> MessageOutcome:
    """The outcome record of this delivery, created empty on first use."""
    slots = message.__dict__
    outcome: MessageOutcome | None = slots.get(_SLOT)
    if outcome is None:
        outcome = slots.setdefault(_SLOT, MessageOutcome())
    return outcome


def fail_message(message: dramatiq.broker.MessageProxy, why: str, error: BaseException | None = None) -> None:
    """Fail a delivery on purpose, saying why (and with which error) for its dead-letter reason."""
    settlement = outcome_of(message).settlement
    settlement.failure = why
    if error is not None:
        settlement.failure_error = error
    message.fail()
