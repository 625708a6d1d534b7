"""A delivery as one consumer received it, and the id of a dead letter that came without one."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import dramatiq
import orjson

from pipelines.outcome import outcome_of

if TYPE_CHECKING:
    from pipelines.broker.rabbitmq.consuming import GroupConsumer

#: Longest message id taken from a body for a dead letter that came without one.
MAX_LETTER_ID_CHARS = 200


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


def letter_id(body: bytes) -> str:
    """An id for a dead letter published without one: the body's ``message_id`` if it has a usable
    one, else a new one (so that ``dlq show``/``replay``/``purge`` can name every letter)."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        decoded = None
    found = decoded.get("message_id") if isinstance(decoded, dict) else None
    if isinstance(found, str) and 0 < len(found) <= MAX_LETTER_ID_CHARS and found.isprintable():
        return found
    return f"unnamed-{uuid.uuid4().hex}"
