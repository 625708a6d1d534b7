"""Publishes RabbitMQ nacks for a reason other than a queue the topology limits (as a quorum queue does
while it elects a leader) are sent again with pauses and reported published only once confirmed; still
refused after ``REFUSED_RETRY_S``, the caller gets a PublishError and nothing is reported published.

The nacks are real: a RabbitMQ policy (not the topology) gives the actor's queue a max length of one
with ``reject-publish``, and the queue is filled until RabbitMQ refuses the next message.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable, Iterator

import dramatiq
import pika
import pytest

from pipelines.broker import ExchangeBroker
from pipelines.broker.rabbitmq import publishing
from pipelines.errors import PublishError, QueueFull
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp
from tests.support.housekeeping import rabbitmqctl

SETTLE_S = 30


@pytest.fixture
def refusing() -> Iterator[Callable[[str], Callable[[], None]]]:
    """``refusing(queue)`` gives ``queue`` a policy of max length one with ``reject-publish``, so that
    RabbitMQ nacks publishes to it once it is full (see ``_fill``); it returns what lifts the policy.
    Every policy set is cleared after the test."""
    names: list[str] = []

    def ctl(*args: str) -> None:
        subprocess.run([*rabbitmqctl(), "-q", *args], check=True, capture_output=True, timeout=60)

    def lift(name: str) -> None:
        if name in names:
            names.remove(name)
            ctl("clear_policy", name)

    def make(queue: str) -> Callable[[], None]:
        name = f"{queue}-refusing"
        definition = '{"max-length": 1, "overflow": "reject-publish"}'
        ctl("set_policy", "--apply-to", "queues", "--priority", "100", name, f"^{queue}$", definition)
        names.append(name)
        return lambda: lift(name)

    yield make
    for name in list(names):
        lift(name)


def _fill(amqp_url: str, queue: str) -> int:
    """Publish to ``queue`` until RabbitMQ nacks (how many a max length admits depends on the queue
    type); how many it took."""
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for taken in range(10):
            try:
                channel.basic_publish("", queue, b"{}", mandatory=True)
            except pika.exceptions.NackError:
                return taken
    raise AssertionError(f"RabbitMQ never refused a message for {queue}: is the policy applied?")


@only_on("rabbitmq")
def test_a_nacked_publish_is_sent_again_and_returns_once_rabbitmq_takes_it(
    make_app: MakeApp, refusing: Callable[[str], Callable[[], None]]
) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    echo = dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queue = app.broker.topology.actor_queues["echo"]
    lift = refusing(queue)
    filled = _fill(app.settings.broker.url, queue)
    retried = threading.Event()

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "refused" in record.getMessage():
                retried.set()

    handler = Retries()
    publishing.logger.addHandler(handler)
    outcome: list[BaseException | None] = []
    sender = threading.Thread(target=lambda: outcome.append(_sent(lambda: echo.send(2))))
    try:
        sender.start()
        assert retried.wait(SETTLE_S), "the nacked publish was never sent again"
        assert outcome == []  # not reported published while RabbitMQ refuses it
        lift()
        sender.join(SETTLE_S)
    finally:
        publishing.logger.removeHandler(handler)

    assert outcome == [None]
    assert app.broker.queue_depth(queue) == filled + 1


@only_on("rabbitmq")
def test_a_publish_still_nacked_after_the_retry_window_raises_and_is_not_published(
    make_app: MakeApp, refusing: Callable[[str], Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publishing, "REFUSED_RETRY_S", 1.0)
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    echo = dramatiq.actor(actor_name="echo", broker=app.broker)(lambda x: x)
    app.broker.ensure_topology()
    queue = app.broker.topology.actor_queues["echo"]
    refusing(queue)
    filled = _fill(app.settings.broker.url, queue)

    with pytest.raises(PublishError) as raised:
        echo.send(2)

    assert not isinstance(raised.value, QueueFull)  # the topology sets no limit: not a full queue
    assert app.broker.queue_depth(queue) == filled


def _sent(send: Callable[[], object]) -> BaseException | None:
    try:
        send()
    except BaseException as e:  # reported by the test
        return e
    return None
