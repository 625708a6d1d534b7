"""Recording what a message did through a store stall: tried again within its lease, then carried.

A worker that ran a message records its outcome (a step's result, an idempotency key done) so that no
other delivery runs it again; a duplicate may claim it once the claim's lease lapses. So the record is
tried again with backoff for up to :data:`RECORD_RETRY_S`, and no later than leaves the lease time for
the copy below to come back (the longest pause between tries, then the copy's delay). If the store
still does not answer, the outcome travels with a copy of the message put off in the delay queues
(:func:`carry`): that copy's delivery records it without running the actor again, and is put off once
more while the store stays down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import dramatiq

from pipelines.errors import PublishError, ServiceUnavailable
from pipelines.handling.deferral import STORE_DOWN_RETRY_DELAY_MS, put_off

logger = logging.getLogger(__name__)

#: Longest a worker keeps trying to record an outcome before a copy of its message carries it, in s.
RECORD_RETRY_S = 15.0
#: First and longest pause between those tries, in s.
RECORD_BACKOFF_S = (0.25, 4.0)

T = TypeVar("T")


def record_within_lease(record: Callable[[], T], *, lease_end: float, what: str) -> T:
    """``record()``, tried again while the store (or the broker) does not answer.

    Args:
        record: Makes the record; raises ``ServiceUnavailable`` or ``PublishError`` when it could not.
        lease_end: When (``time.monotonic()``, s) the claim of the message lapses.
        what: What is recorded, for the log lines of the tries that failed.

    Raises:
        ServiceUnavailable, PublishError: The last try's error, once the time for tries is up.
    """
    deadline = min(
        time.monotonic() + RECORD_RETRY_S, lease_end - RECORD_BACKOFF_S[1] - STORE_DOWN_RETRY_DELAY_MS / 1000
    )
    pause, longest = RECORD_BACKOFF_S
    while True:
        try:
            return record()
        except (ServiceUnavailable, PublishError) as e:
            if time.monotonic() + pause > deadline:
                raise
            logger.warning("Could not record %s yet (%s); trying again.", what, e)
        time.sleep(pause)
        pause = min(pause * 2, longest)


def carry(broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy, option: str, outcome: Any, why: str) -> None:
    """Put ``message`` off with its ``outcome`` in ``option``, so that its next delivery records it
    without running the actor. If the copy cannot be put off, the message is failed (``put_off``), and its
    dead letter keeps the outcome: its replay records it too."""
    message.options[option] = outcome
    put_off(broker, message, STORE_DOWN_RETRY_DELAY_MS, why)
