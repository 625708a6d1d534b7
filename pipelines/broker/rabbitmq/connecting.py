"""Opening a connection to RabbitMQ: each node tried ``connection_attempts`` times, but a silent one once.

pika's own workflow tries every node ``connection_attempts`` times whatever went wrong. A server that
took the TCP connection and did not answer the AMQP handshake within pika's ``stack_timeout`` (15 s
by default) is not slow: RabbitMQ closes a handshake it has not finished within its own
``handshake_timeout`` of 10 s. It is stuck (most often out of file handles), and asking again costs
another 15 s each time: with the default three attempts the answer came after 47 s. So such a node
is tried once per connection; a refused or reset connection (a node starting or restarting) is
tried again, after ``retry_delay`` seconds, as pika would.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pika
import pika.connection
import pika.exceptions
from pika.adapters.utils.connection_workflow import AMQPConnectorException, AMQPConnectorStackTimeout

#: What pika raises when a server took the TCP connection but never answered the AMQP protocol header.
HANDSHAKE_TIMEOUT = (AMQPConnectorStackTimeout,)
#: What pika raises when a connection could not be opened.
CONNECT_ERRORS = (pika.exceptions.AMQPConnectionError, AMQPConnectorException, OSError)


def open_connection(nodes: Any) -> pika.BlockingConnection:
    """A connection to the first of ``nodes`` (pika parameters, one or a sequence) that answers.

    The last node's ``connection_attempts`` and ``retry_delay`` apply to the whole sequence, as in pika.

    Raises:
        pika.exceptions.AMQPConnectionError: The last attempt's error (or AMQPConnectorException, such
            as a handshake timeout when every node kept silent, or OSError).
    """
    remaining = [nodes] if isinstance(nodes, pika.connection.Parameters) else list(nodes)
    attempts, pause = remaining[-1].connection_attempts, remaining[-1].retry_delay
    error: BaseException | None = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(pause)
        for node in list(remaining):
            try:
                return pika.BlockingConnection(_once(node))
            except HANDSHAKE_TIMEOUT as e:
                remaining.remove(node)  # took TCP and kept silent: it will again
                error = e
            except CONNECT_ERRORS as e:
                error = e
        if not remaining:
            break
    assert error is not None
    raise error


def _once(node: Any) -> Any:
    """``node``'s parameters for one attempt (this module does the retrying)."""
    single = copy.copy(node)
    single.connection_attempts = 1
    return single
