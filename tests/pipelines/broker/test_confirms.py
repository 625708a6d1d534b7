"""Publisher confirms are turned on within a bounded wait: a server that never answers is an error, not a
hang (pika's heartbeat would not end the wait when heartbeats are off)."""

from __future__ import annotations

import pika
import pika.channel
import pytest

from pipelines.broker.rabbitmq import confirms
from pipelines.broker.rabbitmq.confirms import ConfirmPublisher, ConfirmTimeout
from tests.support.backends import AMQP_URL


@pytest.mark.usefixtures("services")
def test_a_server_that_never_turns_on_confirms_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confirms, "CONFIRM_TIMEOUT_S", 1.0)
    # As if RabbitMQ never answered confirm.select: the request is never sent.
    monkeypatch.setattr(pika.channel.Channel, "confirm_delivery", lambda self, *a, **k: None)
    parameters = pika.URLParameters(AMQP_URL)
    parameters.heartbeat = 0
    closed: list[bool] = []
    close = ConfirmPublisher.close

    def close_and_see(self: ConfirmPublisher) -> None:
        close(self)
        closed.append(self.connection.is_closed)

    monkeypatch.setattr(ConfirmPublisher, "close", close_and_see)

    with pytest.raises(ConfirmTimeout, match="did not turn on publisher confirms"):
        ConfirmPublisher(parameters, confirm=True)
    assert closed == [True]  # its connection is closed, not left open
