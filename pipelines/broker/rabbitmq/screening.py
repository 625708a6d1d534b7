"""Screening a delivery before any worker thread sees it, and remembering which were dead-lettered.

Any producer can publish anything to an actor's queue. :func:`screen` turns a body and its headers into
the message the queue's actor runs, or raises what makes it a dead letter: over the size limit, not a
JSON Dramatiq message, not for this queue, a fan-out of the wrong shape, a header or an option of the
wrong type (``pipelines.wire_options``). The consumer catches *everything* it raises, so no delivery
can escape to Dramatiq's consumer loop, which would close the channel of every queue in the group and
send their prefetched messages back with their delivery counts raised.

A dead letter is published, then the delivery acknowledged; if the channel dies between the two, the
delivery comes back (``redelivered``). :class:`DeadLetterMarks` remembers every dead letter for a day
by its queue and body, so the redelivered copy is acknowledged without a second dead letter.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import dramatiq

from pipelines.codec import decode_message
from pipelines.delivery import resolve
from pipelines.errors import MessageTooLarge, ServiceUnavailable
from pipelines.store.roles import OnceMarks
from pipelines.wire_options import check_options, delivery_count

logger = logging.getLogger(__name__)

#: How long a dead letter is remembered against redelivered copies, in seconds.
MARK_RETENTION_S = 86_400


def screen(
    body: bytes,
    headers: Mapping[str, Any] | None,
    *,
    actor: str,
    queue_name: str,
    max_bytes: int,
    actors: Mapping[str, dramatiq.Actor[Any, Any]],
) -> tuple[dramatiq.Message[Any], int]:
    """The message ``actor`` runs for this delivery, and how many times RabbitMQ delivered it before.

    Raises:
        MessageTooLarge: The body is over ``max_bytes``.
        MalformedMessage: What makes it malformed, naming the field, option or header.
        UnresolvableMessage: It is not for this queue's actor.
    """
    if len(body) > max_bytes:
        raise MessageTooLarge(f"body is {len(body)} bytes, over broker.max_message_bytes")
    count = delivery_count(headers)
    message = resolve(decode_message(body), actor_name=actor, queue_name=queue_name)
    check_options(message.options, actors=actors)
    return message, count


def dead_letter_reason(error: BaseException) -> str:
    """The dead-letter reason of a delivery :func:`screen` refused (or failed on)."""
    return "message too large" if isinstance(error, MessageTooLarge) else "malformed message"


class DeadLetterMarks:
    """Which deliveries were dead-lettered already, by queue and body, in the run store."""

    def __init__(self, marks: OnceMarks | None) -> None:
        self.marks = marks

    @staticmethod
    def _key(queue: str, body: bytes) -> str:
        return f"dead-letter:{queue}:{hashlib.blake2b(body, digest_size=16).hexdigest()}"

    def remember(self, queue: str, body: bytes) -> None:
        """Record that this delivery was dead-lettered (best effort: a copy may then be dead-lettered twice)."""
        if self.marks is None:
            return
        try:
            self.marks.mark_once(self._key(queue, body), retention_s=MARK_RETENTION_S)
        except ServiceUnavailable as e:
            logger.warning("Could not remember a dead letter of %s (%s); a redelivery may repeat it.", queue, e)

    def seen(self, queue: str, body: bytes) -> bool:
        """Whether this delivery was dead-lettered already (asked only of redelivered ones)."""
        if self.marks is None:
            return False
        try:
            return self.marks.is_marked(self._key(queue, body))
        except ServiceUnavailable:
            return False  # handled as a first delivery: its guards put it off while the store is down
