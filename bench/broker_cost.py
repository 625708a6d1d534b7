"""What RabbitMQ's own CPU per message depends on: queue type, publisher confirms, the exchange a
message is routed through. Raw pika, no framework: messages of a step's size published in a stream
(written without waiting, confirms collected as they come), then consumed and acknowledged one by one.
The node's CPU (``beam.smp`` on the bench's port, user + system) is read around each variant.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pika

from bench.common import AMQP_URL, confirm_stream
from bench.tiers import _cpu_s, _listening_on

#: Bytes of a message body: about what a chain step's message carries.
BODY_BYTES = 700
ROUTING_KEY = "bench.broker.step"


@dataclass(frozen=True)
class Variant:
    name: str
    queue_type: str
    exchange_type: str | None
    """None: the default exchange (routed by queue name)."""
    confirm: bool


VARIANTS = (
    Variant("classic, default exchange, no confirms", "classic", None, False),
    Variant("quorum, default exchange, no confirms", "quorum", None, False),
    Variant("quorum, default exchange, confirms", "quorum", None, True),
    Variant("quorum, topic exchange, confirms", "quorum", "topic", True),
    Variant("quorum, direct exchange, confirms", "quorum", "direct", True),
    Variant("classic, topic exchange, confirms", "classic", "topic", True),
)


def rabbitmq_cpu_per_message(variant: Variant, n: int) -> float:
    """Microseconds of RabbitMQ CPU per message published, delivered and acknowledged."""
    node = _listening_on(AMQP_URL, "beam.smp")
    suffix = uuid.uuid4().hex[:8]
    queue, exchange = f"bench-broker-{suffix}", f"bench-broker-ex-{suffix}" if variant.exchange_type else ""
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": variant.queue_type})
        if variant.exchange_type:
            channel.exchange_declare(exchange, variant.exchange_type, durable=True)
            channel.queue_bind(queue, exchange, routing_key=ROUTING_KEY)
        try:
            before = _cpu_s(node)
            _publish(connection, exchange, ROUTING_KEY if exchange else queue, variant.confirm, n)
            _consume(connection, queue, n)
            return 1e6 * (_cpu_s(node) - before) / n
        finally:
            channel.queue_delete(queue)
            if exchange:
                channel.exchange_delete(exchange)


def _publish(connection: Any, exchange: str, routing_key: str, confirm: bool, n: int) -> None:
    impl = connection.channel()._impl
    confirmed = confirm_stream(connection, impl) if confirm else {"up_to": 0}
    properties = pika.BasicProperties(delivery_mode=2, message_id="m", headers={"step": 1})
    body = b"x" * BODY_BYTES
    for index in range(n):
        impl.basic_publish(exchange, routing_key, body, properties, mandatory=bool(exchange))
        if index % 100 == 99:
            connection.process_data_events(time_limit=0)
    while confirm and confirmed["up_to"] < n:
        connection.process_data_events(time_limit=0.05)
    connection.process_data_events(time_limit=0)


def _consume(connection: Any, queue: str, n: int) -> None:
    channel = connection.channel()
    channel.basic_qos(prefetch_count=100)
    deadline = time.monotonic() + 120
    for taken, (method, _properties, _body) in enumerate(channel.consume(queue, inactivity_timeout=5), start=1):
        if method is None or time.monotonic() > deadline:
            raise TimeoutError(f"only {taken - 1} of {n} messages came back from {queue}")
        channel.basic_ack(method.delivery_tag)
        if taken == n:
            break
    channel.cancel()


def measure(rounds: int, n: int) -> dict[str, list[float]]:
    """Each variant's RabbitMQ CPU per message, ``rounds`` times (variants alternate within a round)."""
    figures: dict[str, list[float]] = {variant.name: [] for variant in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            figures[variant.name].append(rabbitmq_cpu_per_message(variant, n))
    return figures
