"""A local step: a message a worker runs where the step before it finished, with nothing of it in RabbitMQ.

It is a delivery in every way the middleware see (``pipelines.flow.local_steps`` builds it as the run
would have published it), but no broker delivered it: its step was claimed with the completion of the
step before it, its claim's lease is held from then on, and settling it acknowledges nothing. A failure
is dead-lettered by its consumer as a delivery's is; on a worker's shutdown it is published instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

import dramatiq

from pipelines.handling.holds import Hold, Holds
from pipelines.handling.proxy import DeliveredMessage, message_of

logger = logging.getLogger(__name__)


class Enqueuer(Protocol):
    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]: ...


class LocalDelivery(DeliveredMessage):
    """A step run where the one before it finished (see the module docstring)."""

    def __init__(
        self, message: dramatiq.Message[Any], *, holds: Holds, hold: Hold, after: str, chain_started: float
    ) -> None:
        super().__init__(message)
        self.holds = holds
        self.hold = hold
        """The claim of its step, made with the completion of the step before it."""
        self.after = after
        """The id of the step it follows (its entry in the run store's index of local steps)."""
        self.chain_started = chain_started
        """When (``time.monotonic()``) the chain of local steps it belongs to started, in this process."""

    @property
    def local_for_s(self) -> float:
        """How long its chain of local steps has run, in s."""
        return time.monotonic() - self.chain_started

    def hand_back(self, broker: Enqueuer) -> None:
        """On a worker's shutdown, before it ran: publish it instead. Its claim is let go, and the copy
        runs once the claim's lease has lapsed (if it cannot be published, the lapse sweep publishes it)."""
        self.holds.release(self.hold)
        try:
            broker.enqueue(message_of(self))
        except Exception:  # on shutdown: the lapse sweep publishes it again once its lease has lapsed
            logger.exception("Could not hand back local step %s; it is published again later.", self.message_id)
