"""Putting a message off: enqueue a copy with a delay and let the original go.

Used by the middleware that guard a guarantee when they cannot decide now (the run store is down,
another worker holds the message's claim), and by the broker when such a hook fails on a transient
error (:mod:`pipelines.handling.guards`).
"""

from __future__ import annotations

import logging

import dramatiq

from pipelines.errors import PipelinesError
from pipelines.handling.outcome import fail_message, outcome_of
from pipelines.handling.proxy import message_of

logger = logging.getLogger(__name__)

#: Delay before a message that could not be checked against the run store (it was down) is tried again, in ms.
STORE_DOWN_RETRY_DELAY_MS = 5000


def put_off(broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, delay_ms: int, why: str) -> None:
    """Enqueue ``message`` again after ``delay_ms``; if that fails, fail it (it is dead-lettered, not lost).

    The caller raises ``SkipMessage`` afterwards, so the original delivery is acknowledged (or, failed,
    dead-lettered).
    """
    logger.info("Putting off %s for %d ms: %s.", message.message_id, delay_ms, why)
    try:
        broker.enqueue(message_of(message), delay=max(delay_ms, 1))
    except PipelinesError as e:
        logger.exception("Could not put off %s; dead-lettering it instead.", message.message_id)
        fail_message(message, "could not be put off", e)
        return
    outcome_of(message).deferred = True


def put_off_while_store_down(broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, error: Exception) -> None:
    """Put ``message`` off for a few seconds because the run store did not answer (see :func:`put_off`)."""
    put_off(broker, message, STORE_DOWN_RETRY_DELAY_MS, f"the run store is down ({error})")
