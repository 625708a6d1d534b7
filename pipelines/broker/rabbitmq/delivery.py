"""A delivery as one consumer received it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import dramatiq

from pipelines.handling.outcome import outcome_of
from pipelines.handling.proxy import DeliveredMessage


class Settler(Protocol):
    """The consumer a delivery came from, which alone can settle it (its tag is valid on its channel)."""

    def requeue(self, messages: Iterable[dramatiq.broker.MessageProxy]) -> None: ...

    def acknowledge_early(self, message: Delivery) -> None: ...


class Delivery(DeliveredMessage):
    """A message as one consumer received it: its delivery tag is only valid on that consumer's channel."""

    def __init__(
        self,
        message: dramatiq.Message[Any],
        *,
        tag: int,
        redelivered: bool,
        consumer: Settler,
        queue: str,
        routing_key: str,
        delivery_count: int,
        body: bytes = b"",
    ) -> None:
        super().__init__(message)
        self.tag = tag
        self.redelivered = redelivered
        self.consumer = consumer
        self.queue = queue
        self.routing_key = routing_key
        self.body = body
        """The body as it was received (what a redelivered copy of it carries)."""
        self.settled = False
        """Acknowledged already (a long-running job, on start): later settlements send nothing."""
        self.counted = False
        """Holds a slot of the process's long-running window until it is settled."""
        outcome = outcome_of(self)
        outcome.queue = queue
        outcome.delivery_count = delivery_count
