"""Records why a message is dead-lettered, for the broker to carry into the dead-letter queue.

Every failed message is rejected by the worker (Dramatiq nacks it); just before that, this middleware
leaves a :class:`~pipelines.dead_letters.DeadLetterReason` on the message: the failure (retries
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
from pipelines.dead_letters import reason_for
from pipelines.outcome import outcome_of

logger = logging.getLogger(__name__)


class DeadLetter(Middleware):
    """Leaves the reason of every rejection on the message (see the module docstring)."""

    def before_nack(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        outcome = outcome_of(message)
        exception = outcome.failure_error or message._exception
        why = outcome.failure
        if why is None:
            why = "unknown actor" if isinstance(exception, ActorNotFound) else "rejected"
        if outcome.drop:
            return  # a fire-and-forget message past its retries is dropped, not dead-lettered
        reason = reason_for(message, reason=why, exception=exception)
        if outcome.attempts is not None:
            reason = replace(reason, attempts=outcome.attempts)  # ``retries`` counts this failure already
        outcome.dead_letter = reason
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
