"""A notification engine: one message per user, then a summary of what was delivered; welcome e-mails."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq

logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="notifications")
def notify_user(user_id: int, campaign: str) -> bool:
    """Deliver one campaign notification; False when the user opted out (every 97th here)."""
    return user_id % 97 != 0


@dramatiq.actor(queue_name="notifications")
def summarize_notifications(campaign: str, delivered: list[bool]) -> dict[str, Any]:
    """Count deliveries and opt-outs of a campaign."""
    sent = sum(1 for ok in delivered if ok)
    return {"campaign": campaign, "sent": sent, "opted_out": len(delivered) - sent}


@dramatiq.actor(queue_name="notifications", profile="fire_and_forget")
def send_welcome_email(user_id: int) -> None:
    """Say hello to a new user. Nice to have: a few retries, then it is dropped (and counted)."""
    logger.info("welcome e-mail to user %s", user_id)
