"""Order fulfilment: charge, then inventory, shipping and the confirmation e-mail at once.

``order.placed`` events start the fulfilment pipeline (one run per order, whatever the number of
times the event arrives); every ``order.*`` event is audited.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import dramatiq
from pydantic import BaseModel

import pipelines

logger = logging.getLogger(__name__)


def _reference(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:10]
    return f"{prefix}_{digest}"


@dramatiq.actor(
    queue_name="orders",
    profile="guaranteed",
    idempotency_key=lambda order_id, **_: f"charge-{order_id}",
    throws=(ValueError,),  # a bad total stays bad: dead-letter it at once instead of retrying
)
def charge_payment(order_id: int, total: float) -> dict[str, Any]:
    """Charge the customer for an order, once per order; the payment feeds every later step."""
    logger.info("charging order %s: %s", order_id, total)
    if total <= 0:
        raise ValueError(f"order {order_id} has a non-positive total {total}")
    return {"order_id": order_id, "amount": round(total, 2), "payment_id": _reference("pay", order_id, total)}


@dramatiq.actor(queue_name="orders")
def reserve_inventory(payment: dict[str, Any]) -> dict[str, Any]:
    """Hold the order's items in the warehouse."""
    return {"reservation_id": _reference("res", payment["order_id"])}


@dramatiq.actor(queue_name="orders")
def schedule_shipping(payment: dict[str, Any]) -> dict[str, Any]:
    """Book a carrier pick-up for the order."""
    return {"tracking_id": _reference("trk", payment["order_id"])}


@dramatiq.actor(queue_name="emails")
def send_order_confirmation(payment: dict[str, Any]) -> dict[str, Any]:
    """E-mail the customer the payment and order summary."""
    return {"email_id": _reference("mail", payment["order_id"], payment["payment_id"])}


@dramatiq.actor(queue_name="orders")
def complete_order(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the reservation, the shipment and the e-mail into the order's final record."""
    record: dict[str, Any] = {"status": "fulfilled"}
    for outcome in outcomes:
        record.update(outcome)
    return record


class OrderPlaced(BaseModel):
    """The ``order.placed`` event: an event that does not fit is dead-lettered at once, not retried."""

    order_id: int
    total: float


@dramatiq.actor(queue_name="orders", subscribe=["order.placed"], payload=OrderPlaced)
def start_fulfilment(order: OrderPlaced) -> None:
    """Start the fulfilment pipeline for a placed order, once per order id."""
    pipelines.current_app().run(
        "order_fulfilment", idempotency_key=f"order-{order.order_id}", order_id=order.order_id, total=order.total
    )


@dramatiq.actor(queue_name="audit", subscribe=["order.*"])
def audit_order_event(event: dict[str, Any]) -> None:
    """Keep a trail of every order event."""
    logger.info("order event: %s", event)
