"""Faults while the real consumer settles a delivery end in one outcome, and never restart the consumer.

The broker's publishes fail where a delivery is dead-lettered or sent on to its next delay tier, and
handling a delivery fails outright; each delivery still ends dead-lettered once, with a reason, and
Dramatiq neither restarts the consumer (which would return every prefetched message of the group) nor
logs a settlement that raised (which it drops, as its own bug). Each test takes a few seconds.
"""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest

from pipelines.app import App
from pipelines.broker.rabbitmq import consuming
from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.errors import BrokerUnavailable
from tests.support.fail_closed.fail_closed_support import ConsumerRestarts, dead_letters_by_id, wait_until
from tests.support.fixtures import MakeApp, StartWorker

SETTLE_S = 30


def failing_dead_letters(app: App, monkeypatch: pytest.MonkeyPatch, times: int | None) -> list[str]:
    """Make the broker's dead-letter publish fail ``times`` times (None: always); returns the ids it failed."""
    publish = app.broker.dead_letter
    failed: list[str] = []

    def dead_letter(body: bytes, **kwargs: Any) -> None:
        if times is None or len(failed) < times:
            failed.append(kwargs["message_id"])
            raise BrokerUnavailable("RabbitMQ did not take the dead letter (injected)")
        publish(body, **kwargs)

    monkeypatch.setattr(app.broker, "dead_letter", dead_letter)
    return failed


def test_a_long_running_job_whose_dead_letter_cannot_be_published_yet_is_dead_lettered_once_when_it_can(
    make_app: MakeApp, start_worker: StartWorker, consumer_restarts: ConsumerRestarts, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker, profile="long_running", lease_s=5, max_retries=0)
    def export(table: str) -> None:
        raise ValueError(f"no table {table}")

    failed = failing_dead_letters(app, monkeypatch, times=2)
    worker = start_worker(app)
    sent = export.send("orders")  # acknowledged when it starts: its dead letter is all that is left of it

    wait_until(lambda: dead_letters_by_id(app)[sent.message_id] > 0, SETTLE_S, "the job's dead letter")
    worker.stop()

    [letter] = app.dead_letters.list()
    assert letter.id == sent.message_id
    assert letter.reason.error == "no table orders"
    assert failed == [sent.message_id] * 2
    assert (consumer_restarts.restarts, consumer_restarts.unsettled) == (0, 0), consumer_restarts.errors[:3]


def test_a_message_whose_dead_letter_cannot_be_published_is_rejected_to_rabbitmqs_dead_lettering(
    make_app: MakeApp, start_worker: StartWorker, consumer_restarts: ConsumerRestarts, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def charge(order_id: int) -> None:
        raise ValueError(f"order {order_id} is bad")

    failed = failing_dead_letters(app, monkeypatch, times=None)
    worker = start_worker(app)
    sent = charge.send(7)

    wait_until(lambda: dead_letters_by_id(app)[sent.message_id] > 0, SETTLE_S, "the message's dead letter")
    worker.stop()

    [letter] = app.dead_letters.list()
    assert letter.reason.reason == "rejected"  # RabbitMQ's own, without ours
    assert failed == [sent.message_id]
    assert (consumer_restarts.restarts, consumer_restarts.unsettled) == (0, 0), consumer_restarts.errors[:3]


def test_a_delayed_message_that_cannot_go_on_to_its_next_delay_tier_is_dead_lettered_without_a_restart(
    make_app: MakeApp, start_worker: StartWorker, consumer_restarts: ConsumerRestarts, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    ran: list[int] = []

    @dramatiq.actor(broker=app.broker)
    def remind(n: int) -> None:
        ran.append(n)

    def redelay(message: dramatiq.Message[Any], eta_ms: int) -> None:
        raise RuntimeError("the next delay tier is gone (injected)")

    # 3 s waits 1 s in a delay tier first, then comes back early to go on to the next one.
    monkeypatch.setattr(app.broker, "redelay", redelay)
    start_worker(app)
    delayed = remind.send_with_options(args=(1,), delay=3000)
    remind.send(2)

    wait_until(lambda: dead_letters_by_id(app)[delayed.message_id] > 0, SETTLE_S, "the delayed message's dead letter")

    [letter] = app.dead_letters.list()
    assert letter.reason.reason == "could not be delayed"
    assert letter.reason.error == "the next delay tier is gone (injected)"
    assert ran == [2]
    assert (consumer_restarts.restarts, consumer_restarts.unsettled) == (0, 0), consumer_restarts.errors[:3]


def test_a_fault_while_taking_a_delivery_dead_letters_it_and_the_messages_around_it_run(
    make_app: MakeApp, start_worker: StartWorker, consumer_restarts: ConsumerRestarts, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    ran: list[int] = []

    @dramatiq.actor(broker=app.broker)
    def tally(n: int) -> None:
        ran.append(n)

    class FaultyDelivery(Delivery):
        def __init__(self, message: dramatiq.Message[Any], **kwargs: Any) -> None:
            if message.args == (13,):
                raise RuntimeError("a fault in the consumer (injected)")
            super().__init__(message, **kwargs)

    monkeypatch.setattr(consuming, "Delivery", FaultyDelivery)
    for n in range(10, 17):
        tally.send(n)
    start_worker(app)

    wait_until(lambda: len(ran) == 6 and len(app.dead_letters.list()) == 1, SETTLE_S, "six runs and a dead letter")

    [letter] = app.dead_letters.list()
    assert letter.reason.reason == "could not be consumed"
    assert letter.reason.error == "a fault in the consumer (injected)"
    assert sorted(ran) == [10, 11, 12, 14, 15, 16]
    assert (consumer_restarts.restarts, consumer_restarts.unsettled) == (0, 0), consumer_restarts.errors[:3]
