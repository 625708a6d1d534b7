"""Dead-lettering one consumer's deliveries: published with the reason, remembered, then settled.

A delivery the consumer could not take (screening) or a worker failed is published to its actor's
dead-letter queue with the reason, remembered (``dead_letter_marks``, so a redelivered copy is not
dead-lettered again) and acknowledged; if that publish fails, it is rejected instead, so RabbitMQ
dead-letters it (without our reason) and nothing is lost. A long-running job was acknowledged when it
started, so its dead letter is all that is left of it: its publish is tried again until it goes
through, and only the worker stopping ends the tries (logged with the failure).

Nothing here raises but ``ConnectionClosed`` (the consumer's connection is gone: Dramatiq's worker
reconnects and RabbitMQ redelivers the delivery): whatever else fails, the delivery is settled.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from dramatiq.errors import ConnectionClosed

from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.broker.rabbitmq.settling import Settlements
from pipelines.broker.rabbitmq.window import LongRunningWindow
from pipelines.dead_letters.reasons import DeadLetterReason, reason_for
from pipelines.errors import PipelinesError
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.outcome import outcome_of
from pipelines.handling.proxy import exception_of, message_of
from pipelines.wire.codec import encode_message

if TYPE_CHECKING:
    from pipelines.broker.rabbitmq.dead_letter_marks import DeadLetterMarks
    from pipelines.wire.topology import Topology

logger = logging.getLogger(__name__)

#: Pauses between tries of the dead letter of a job acknowledged on start, in seconds: the first, the longest.
SETTLED_FIRST_PAUSE_S = 0.5
SETTLED_MAX_PAUSE_S = 5.0


class DeadLetteringBroker(Protocol):
    """What dead-lettering needs of the broker: where an actor's letters go, and how to put them there."""

    @property
    def topology(self) -> Topology: ...

    @property
    def dead_letter_marks(self) -> DeadLetterMarks: ...

    def dead_letter(self, body: bytes, *, message_id: str, reason: DeadLetterReason, queue: str) -> None: ...


class DeadLettering:
    """Dead-letters the deliveries of one consumer (see the module docstring)."""

    def __init__(self, *, broker: DeadLetteringBroker, settlements: Settlements, window: LongRunningWindow) -> None:
        self.broker = broker
        self.settlements = settlements
        self.window = window

    def home(self, actor: str) -> str:
        """The queue whose dead-letter queue takes ``actor``'s dead letters (partitions share one)."""
        return self.broker.topology.actor_queues[actor]

    def dead_letter_body(self, tag: int, body: bytes, message_id: str, reason: DeadLetterReason) -> None:
        """Dead-letter the body of a delivery no worker thread may see (``reason`` names its actor and queue)."""
        try:
            home = self.home(reason.actor or "")
        except KeyError:  # no actor of this namespace (any more): RabbitMQ's dead-lettering takes it
            logger.error("Rejecting %s: %s has no dead-letter queue here.", message_id, reason.actor)
            self.settlements.reject(tag, requeue=False)
            return
        self.publish(tag, body, message_id, reason, home, received=body)

    def publish(
        self, tag: int, body: bytes, message_id: str, reason: DeadLetterReason, home: str, *, received: bytes
    ) -> None:
        """Publish ``body`` as the dead letter of delivery ``tag``, remember it by the ``received`` body,
        then acknowledge the delivery; reject it instead if the publish fails."""
        try:
            self.broker.dead_letter(body, message_id=message_id, reason=reason, queue=home)
        except Exception:  # whatever failed, the delivery is settled: rejected to RabbitMQ's dead-lettering
            logger.exception("Could not dead-letter %s with its reason; rejecting it instead.", message_id)
            self.settlements.reject(tag, requeue=False)
            return
        self.broker.dead_letter_marks.remember(reason.queue or home, received)
        self.settlements.ack(tag)

    def failed(self, message: Delivery) -> None:
        """Settle a delivery the worker failed: dropped (fire-and-forget), or dead-lettered with its reason."""
        try:
            self._failed(message)
        except ConnectionClosed:
            raise  # Dramatiq tries again; once its consumer is replaced, RabbitMQ redelivers it instead
        except Exception:  # whatever failed, the delivery is settled: rejected to RabbitMQ's dead-lettering
            logger.exception("Could not dead-letter %s with its reason; rejecting it instead.", message.message_id)
            if not message.settled:
                self.settlements.reject(message.tag, requeue=False)

    def _failed(self, message: Delivery) -> None:
        outcome = outcome_of(message)
        if outcome.settlement.drop:
            logger.warning("Dropping %s of %s after its retries.", message.message_id, message.actor_name)
            if not message.settled:
                self.settlements.ack(message.tag)
            return
        reason = outcome.settlement.dead_letter or reason_for(
            message, reason="rejected", exception=exception_of(message)
        )
        reason = replace(reason, queue=message.queue, routing_key=message.routing_key)
        try:
            body = encode_message(message_of(message))
        except PipelinesError as e:  # a middleware set an option JSON cannot carry: the body as it came
            logger.warning("Dead-lettering %s as it was received: %s", message.message_id, e)
            body = message.body
        home = self.home(message.actor_name)
        if message.settled:
            self._settled(message, body, reason, home)
        else:
            self.publish(message.tag, body, message.message_id, reason, home, received=message.body)

    def failed_local(self, message: LocalDelivery) -> None:
        """Dead-letter a local step the worker failed (nothing of it is in RabbitMQ to reject), or drop it."""
        outcome = outcome_of(message)
        if outcome.settlement.drop:
            logger.warning("Dropping %s of %s after its retries.", message.message_id, message.actor_name)
            return
        reason = outcome.settlement.dead_letter or reason_for(
            message, reason="rejected", exception=exception_of(message)
        )
        home = self.home(message.actor_name)
        # Where it would have arrived, had it been published: its actor's queue, by its actor's name.
        reason = replace(reason, queue=home, routing_key=message.actor_name)
        self._settled(message, encode_message(message_of(message)), reason, home)

    def _settled(self, message: Delivery | LocalDelivery, body: bytes, reason: DeadLetterReason, home: str) -> None:
        """The dead letter of a job acknowledged when it started, or of a local step: tried until it goes
        through."""
        pause_s = SETTLED_FIRST_PAUSE_S
        while True:
            try:
                self.broker.dead_letter(body, message_id=message.message_id, reason=reason, queue=home)
            except Exception as e:  # on a worker thread: Dramatiq would log it as its own bug and drop it
                if self.window.stopping:
                    logger.error(
                        "Could not dead-letter %s of %s (%s: %s), acknowledged when it started, and the worker "
                        "stops: it is lost. Its failure is in this log; send it again if it must run.",
                        message.message_id,
                        message.actor_name,
                        reason.reason,
                        e,
                    )
                    return
                logger.warning("Could not dead-letter %s yet (%s); again in %g s.", message.message_id, e, pause_s)
                time.sleep(pause_s)
                pause_s = min(pause_s * 2, SETTLED_MAX_PAUSE_S)
                continue
            if isinstance(message, Delivery):
                self.broker.dead_letter_marks.remember(message.queue, message.body)
            return
