"""A user's activity timeline: events of one user are recorded one at a time, in the order sent."""

from __future__ import annotations

import logging

import dramatiq

logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="timeline", profile="ordered", ordering_key="user_id", partitions=8)
def record_timeline_event(user_id: int, event: str) -> None:
    """Append ``event`` to the user's timeline; different users are recorded in parallel."""
    logger.info("timeline of user %s: %s", user_id, event)
