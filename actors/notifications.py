"""A notification engine: one message per user, then a summary of what was delivered."""

from __future__ import annotations

from typing import Any

import dramatiq


@dramatiq.actor(queue_name="notifications")
def notify_user(user_id: int, campaign: str) -> bool:
    """Deliver one campaign notification; False when the user opted out (every 97th here)."""
    return user_id % 97 != 0


@dramatiq.actor(queue_name="notifications")
def summarize_notifications(campaign: str, delivered: list[bool]) -> dict[str, Any]:
    """Count deliveries and opt-outs of a campaign."""
    sent = sum(1 for ok in delivered if ok)
    return {"campaign": campaign, "sent": sent, "opted_out": len(delivered) - sent}
