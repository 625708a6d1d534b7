"""Brokers: RabbitMQ through exchanges, or the embedded in-memory broker with the same routing."""

from __future__ import annotations

import dramatiq

from pipelines.broker.common import PipelineBroker, pipeline_broker
from pipelines.broker.memory import MemoryBroker
from pipelines.broker.rabbitmq import ExchangeBroker
from pipelines.config.sections import BrokerConfig
from pipelines.dead_letters.reasons import DeadLetterAdmin
from pipelines.sending.outbound import Outbound
from pipelines.store.roles import OnceMarks

__all__ = ["DeadLetterAdmin", "ExchangeBroker", "MemoryBroker", "PipelineBroker", "make_broker", "pipeline_broker"]


def make_broker(
    config: BrokerConfig,
    *,
    namespace: str,
    outbound: Outbound,
    middleware: list[dramatiq.Middleware],
    marks: OnceMarks | None = None,
) -> ExchangeBroker | MemoryBroker:
    """The broker ``config.url`` names: ``memory://`` or RabbitMQ (``amqp://``, ``amqps://``), preparing
    what it publishes with ``outbound`` (and remembering its dead letters in ``marks``, so a redelivered
    copy of one is not dead-lettered twice)."""
    if config.is_memory:
        return MemoryBroker(config=config, namespace=namespace, outbound=outbound, middleware=middleware)
    return ExchangeBroker(config=config, namespace=namespace, outbound=outbound, middleware=middleware, marks=marks)
