"""Records why a message is dead-lettered, for the broker to carry into the dead-letter queue.

Every failed message is rejected by the worker (Dramatiq nacks it); just before that, this middleware
leaves a :class:`~pipelines.dead_letters.reasons.DeadLetterReason` on the message: the failure (retries
exhausted, permanent error, unknown actor, ...), the error's type, text and traceback excerpt, the
attempts, the actor, the correlation id, the run and step, the time. The RabbitMQ broker publishes the
message with those headers to the dead-letter exchange and acknowledges it; the memory broker keeps the
reason with the dead letter.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import dramatiq
from dramatiq.errors import ActorNotFound
from dramatiq.middleware import Middleware

from pipelines.context import MessageContext, about_message
from pipelines.dead_letters.reasons import reason_for
from pipelines.handling.outcome import outcome_of
from pipelines.handling.proxy import exception_of

logger = logging.getLogger(__name__)


class DeadLetter(Middleware):
    """Leaves the reason of every rejection on the message (see the module docstring)."""

    def before_nack(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        outcome = outcome_of(message)
        exception = outcome.settlement.failure_error or exception_of(message)
        why = outcome.settlement.failure
        if why is None:
            why = "unknown actor" if isinstance(exception, ActorNotFound) else "rejected"
        if outcome.settlement.drop:
            return  # a fire-and-forget message past its retries is dropped, not dead-lettered
        reason = reason_for(message, reason=why, exception=exception)
        if outcome.settlement.attempts is not None:
            reason = replace(reason, attempts=outcome.settlement.attempts)  # ``retries`` counts this failure already
        outcome.settlement.dead_letter = reason
        # One line per dead letter, whatever Dramatiq logged for the failure (an expected exception,
        # one in ``throws``, is only an info line there). Rejections run on the consumer thread,
        # outside the message's context: the line gets the message's ids explicitly.
        with about_message(MessageContext.of(message)):
            logger.error(
                "Dead-lettering %s of %s (%s): %s: %s",
                message.message_id,
                message.actor_name,
                why,
                reason.error_type,
                reason.error,
            )
