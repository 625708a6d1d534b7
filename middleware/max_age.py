"""Dramatiq's ``AgeLimit``, with a dead letter that says why: a message older than its ``max_age`` does not run.

As in Dramatiq, the age counts from when the message was first sent (its ``message_timestamp``, which a
retry keeps, so the waits between retries count too; moved forward by the time a producer's first publish
spends declaring the topology) to when a worker takes it, and ``max_age`` (ms)
comes from the message, else the actor. A message past it is failed without running: dead-lettered
once with the reason ``max age exceeded`` and its age in the error (Dramatiq's went to ``.XQ`` with no
reason). A pipeline step's run fails there, naming the step (``PipelineSteps``). A replayed dead
letter is a new send, so its age starts again.
"""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.common import current_millis
from dramatiq.middleware import AgeLimit, SkipMessage

from pipelines.errors import MaxAgeExceeded
from pipelines.handling.outcome import fail_message
from pipelines.wire import option_values as wire_options

logger = logging.getLogger(__name__)

#: The dead-letter reason of a message that waited past its ``max_age``.
MAX_AGE_EXCEEDED = "max age exceeded"


class MaxAge(AgeLimit):
    """Dramatiq's ``AgeLimit`` (same ``max_age`` option), failing with the reason (see the module docstring)."""

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        actor = broker.get_actor(message.actor_name)
        max_age = wire_options.max_age_ms(message.options) or actor.options.get(wire_options.MAX_AGE, self.max_age)
        if not max_age:
            return
        age = current_millis() - message.message_timestamp
        if age >= max_age:
            logger.warning("Message %s is %d ms old, past its max_age of %d ms: not running it.", message, age, max_age)
            error = MaxAgeExceeded(
                f"The message was {age} ms old when a worker took it, past its max_age of {max_age:g} ms. Send "
                "it again (or replay its dead letter) to run it; raise max_age if it may wait that long."
            )
            fail_message(message, MAX_AGE_EXCEEDED, error)
            raise SkipMessage(MAX_AGE_EXCEEDED)
