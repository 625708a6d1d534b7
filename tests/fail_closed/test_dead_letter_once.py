"""A dead letter is published once, even when the acknowledgement of its delivery is lost.

The worker reaches RabbitMQ through a TCP proxy. A message fails for good and is dead-lettered; right
after its dead letter is published and remembered, and before its acknowledgement is sent, the proxy
cuts every connection, as a network fault or a restarted load balancer would. RabbitMQ never got the
ack, so it delivers the message again once the worker reconnects: the copy is acknowledged without
running the actor again and without a second dead letter. About 5 s (Dramatiq restarts its consumer
after a second or two).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import dramatiq
import pytest

from pipelines.broker import ExchangeBroker
from tests.support.backends import AMQP_URL
from tests.support.fail_closed.fail_closed_support import dead_letters_by_id, wait_until
from tests.support.faults.tcp_proxy import TcpProxy
from tests.support.fixtures import MakeApp, StartWorker

SETTLE_S = 30


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    """A proxy to the test RabbitMQ, started; stopped after the test (and after its apps' cleanup)."""
    parts = urlsplit(AMQP_URL)
    found = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5672))
    found.start()
    yield found
    found.stop()


class Copies(logging.Handler):
    """Counts the redelivered copies the consumer acknowledged as dead-lettered already."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.acknowledged = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "redelivered copy of a message dead-lettered already" in record.getMessage():
            self.acknowledged += 1


@pytest.fixture
def copies() -> Iterator[Copies]:
    handler = Copies()
    target = logging.getLogger("pipelines.broker.rabbitmq.consuming")
    target.addHandler(handler)
    yield handler
    target.removeHandler(handler)


def test_a_dead_lettered_message_whose_ack_was_lost_with_its_connection_is_not_dead_lettered_again(
    proxy: TcpProxy, make_app: MakeApp, start_worker: StartWorker, copies: Copies
) -> None:
    # (The proxy is set up first, so that it is still there when the app's namespace is deleted.)
    parts = urlsplit(AMQP_URL)
    app = make_app(
        broker={"url": parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}").geturl()}
    )
    assert isinstance(app.broker, ExchangeBroker)
    runs: list[int] = []

    @dramatiq.actor(broker=app.broker, max_retries=0)
    def settle(invoice: int) -> None:
        runs.append(invoice)
        raise ValueError(f"invoice {invoice} is void")

    marks = app.broker.dead_letter_marks
    remember = marks.remember
    cut = threading.Event()

    def remember_then_cut(queue: str, body: bytes) -> None:
        remember(queue, body)
        if not cut.is_set():
            proxy.stop()  # the dead letter is out and remembered; its delivery's ack is not sent yet
            cut.set()  # only now: the test starts the proxy again once this is set

    marks.remember = remember_then_cut  # type: ignore[method-assign]
    start_worker(app)
    sent = settle.send(7)

    assert cut.wait(SETTLE_S), "the message was never dead-lettered"
    proxy.start()
    wait_until(lambda: copies.acknowledged > 0, SETTLE_S, "the redelivered copy acknowledged")

    assert runs == [7]
    assert dead_letters_by_id(app) == {sent.message_id: 1}
    assert copies.acknowledged == 1
