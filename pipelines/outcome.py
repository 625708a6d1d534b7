"""What is known and decided about one delivery, in one typed record that travels with it.

Middleware decide things about a message that others act on later: ``Backoff`` schedules a retry or
gives up, a claim skips a duplicate, ``DeadLetter`` writes the reason, and the broker settles the
delivery by those decisions while ``Metrics`` counts them. They share one :class:`MessageOutcome` per
delivery, reached with :func:`outcome_of`, instead of attributes set on the message proxy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import dramatiq

    from pipelines.dead_letters import DeadLetterReason
    from pipelines.progress import Job

#: Where a proxy keeps its outcome (in its own ``__dict__``: the proxy forwards unknown names to the message).
_SLOT = "_pipelines_outcome"


class KeyClaim(NamedTuple):
    """An idempotency key this delivery claimed, the holder token the claim was made with, and when
    (``time.monotonic()``, s) the claim's lease lapses."""

    key: str
    holder: str
    lease_end: float = 0.0


@dataclass(slots=True)
class MessageOutcome:
    """One delivery's facts and the decisions taken about it while it was processed."""

    # What the broker knew when it delivered the message.
    queue: str | None = None
    """The RabbitMQ queue it arrived on (None in memory)."""
    delivery_count: int = 0
    """How many times RabbitMQ delivered it before (a quorum queue's count; 0 in memory)."""

    # Why it failed, and how the broker settles it.
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

    # What was done with it, for the metrics.
    duplicate: bool = False
    """Skipped as a duplicate (its step, key or tick ran already)."""
    retry_scheduled: bool = False
    """A retry was scheduled (in the delay queues, or in place)."""
    deferred: bool = False
    """Put off: a copy was enqueued with a delay, and this delivery let go without running."""

    # What a middleware holds between its before and after hooks.
    time_limit_ms: float | None = None
    """The time limit it runs under (``Timeout``'s choice, enforced by ``ActorTimeLimit``), kept here and
    not in its options, so a retry or a replay runs under its actor's limit of that time."""
    job: Job | None = None
    """The running job (``Leases``): its run step, and its lease for a long-running actor."""
    key_claim: KeyClaim | None = None
    """The idempotency key claimed before it ran (``Idempotency``), recorded or released after."""


def outcome_of(message: dramatiq.broker.MessageProxy) -> MessageOutcome:
    """The outcome record of this delivery, created empty on first use."""
    slots = message.__dict__
    outcome: MessageOutcome | None = slots.get(_SLOT)
    if outcome is None:
        outcome = slots.setdefault(_SLOT, MessageOutcome())
    return outcome


def fail_message(message: dramatiq.broker.MessageProxy, why: str, error: BaseException | None = None) -> None:
    """Fail a delivery on purpose, saying why (and with which error) for its dead-letter reason."""
    outcome = outcome_of(message)
    outcome.failure = why
    if error is not None:
        outcome.failure_error = error
    message.fail()
