"""Opening a connection: a node that takes TCP and never answers the handshake is asked once, a node that
closes at once (starting, restarting) as often as ``connection_attempts`` says, and a live one answers."""

from __future__ import annotations

import pika
import pytest
from pika.adapters.utils.connection_workflow import AMQPConnectorStackTimeout

from pipelines.broker.rabbitmq.connecting import open_connection
from tests.support.backends import AMQP_URL
from tests.support.stuck_servers import StuckServer


def node(port: int) -> pika.URLParameters:
    """A node on ``port`` with three attempts, no pause between them, and a 1 s handshake timeout."""
    return pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{port}/%2F?connection_attempts=3&retry_delay=0&stack_timeout=1"
    )


def test_a_node_that_never_answers_the_handshake_is_asked_once_however_many_attempts(
    silent_server: StuckServer,
) -> None:
    with pytest.raises(AMQPConnectorStackTimeout):
        open_connection(node(silent_server.port))

    assert silent_server.taken == 1


def test_a_node_that_closes_the_connection_at_once_is_asked_on_every_attempt(
    silent_server: StuckServer, closing_server: StuckServer
) -> None:
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        open_connection([node(silent_server.port), node(closing_server.port)])

    assert (silent_server.taken, closing_server.taken) == (1, 3)


@pytest.mark.usefixtures("services")
def test_a_live_node_after_a_silent_one_answers(silent_server: StuckServer) -> None:
    live = pika.URLParameters(AMQP_URL)
    live.connection_attempts, live.retry_delay = 3, 0

    connection = open_connection([node(silent_server.port), live])
    try:
        assert connection.is_open
    finally:
        connection.close()
    assert silent_server.taken == 1
