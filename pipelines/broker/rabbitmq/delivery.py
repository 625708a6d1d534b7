"""A delivery as one consumer received it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dramatiq

from pipelines.outcome import outcome_of

if TYPE_CHECKING:
    from pipelines.broker.rabbitmq.consuming import GroupConsumer


class Delivery(dramatiq.broker.MessageProxy):
    """A message as one consumer received it: its delivery tag is only valid on that consumer's channel."""

    def __init__(
        self,
        message: dramatiq.Message[Any],
        *,
        tag: int,
        redelivered: bool,
        consumer: GroupConsumer,
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
