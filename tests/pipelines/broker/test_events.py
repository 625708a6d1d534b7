"""Domain events: one publish reaches every subscribed actor through the events exchange."""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import pytest

from pipelines.errors import DefinitionError, Unroutable
from tests.support.broker_witness import PublishCounts
from tests.support.fixtures import MakeApp, Observe, StartWorker


def test_an_event_with_three_subscribers_reaches_all_three_from_one_publish(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    observer = observe(app)
    received: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def subscriber(name: str, patterns: list[str]) -> None:
        def handle(event: dict[str, Any]) -> None:
            with lock:
                received.append((name, event))

        dramatiq.actor(actor_name=name, broker=app.broker, subscribe=patterns)(handle)

    subscriber("bill_order", ["order.placed"])
    subscriber("pack_order", ["order.*"])
    subscriber("audit_everything", ["#"])
    subscriber("on_refunds", ["refund.*"])
    start_worker(app)

    published = publishes(app)  # as the broker counts them
    app.publish("order.placed", {"order_id": 7})
    for name in ("bill_order", "pack_order", "audit_everything"):
        observer.wait_handled(name, 1)

    assert published.count("events") == 1
    assert sorted(received) == [
        ("audit_everything", {"order_id": 7}),
        ("bill_order", {"order_id": 7}),
        ("pack_order", {"order_id": 7}),
    ]
    assert "on_refunds" not in observer.handled


def test_an_event_nobody_subscribes_to_is_refused_not_dropped(make_app: MakeApp) -> None:
    app = make_app()
    dramatiq.actor(actor_name="on_orders", broker=app.broker, subscribe=["order.*"])(lambda event: None)

    with pytest.raises(Unroutable, match=r"bound for invoice\.paid"):
        app.publish("invoice.paid", {"id": 1})


@pytest.mark.parametrize("topic", ["", "order..placed", "order placed", "order.*"])
def test_a_topic_that_is_not_dot_separated_words_is_refused(make_app: MakeApp, topic: str) -> None:
    app = make_app()
    dramatiq.actor(actor_name="on_all", broker=app.broker, subscribe=["#"])(lambda event: None)

    with pytest.raises(DefinitionError, match="is not dot-separated words"):
        app.publish(topic, {})


def test_actors_with_unroutable_names_or_subscriptions_are_refused_when_declared(make_app: MakeApp) -> None:
    app = make_app()

    with pytest.raises(DefinitionError, match=r"Actor name 'billing\.charge' cannot be routed"):
        dramatiq.actor(actor_name="billing.charge", broker=app.broker)(lambda: None)
    with pytest.raises(DefinitionError, match=r"subscribe='order\.\*' must be a list of topic patterns"):
        dramatiq.actor(actor_name="on_order", broker=app.broker, subscribe="order.*")(lambda: None)
