"""Brokers: RabbitMQ through exchanges, or the embedded in-memory broker with the same routing."""

from __future__ import annotations

from typing import Any, Protocol

import dramatiq

from pipelines.broker.memory import MemoryBroker
from pipelines.broker.rabbitmq import ExchangeBroker
from pipelines.config import BrokerConfig
from pipelines.topology import Topology

__all__ = ["ExchangeBroker", "MemoryBroker", "PipelineBroker", "make_broker"]


class PipelineBroker(Protocol):
    """What the runtime needs from a broker, besides being a Dramatiq broker."""

    namespace: str
    actors: dict[str, dramatiq.Actor[Any, Any]]
    publish_count: int

    @property
    def topology(self) -> Topology: ...

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]: ...

    def enqueue_many(
        self, messages: list[dramatiq.Message[Any]], *, delay: int | None = None
    ) -> list[dramatiq.Message[Any]]: ...

    def publish_event(
        self, topic: str, payload: Any, *, options: dict[str, Any] | None = None
    ) -> dramatiq.Message[Any]: ...

    def get_actor(self, actor_name: str) -> dramatiq.Actor[Any, Any]: ...

    def close(self) -> None: ...


def make_broker(
    config: BrokerConfig, *, namespace: str, middleware: list[dramatiq.Middleware]
) -> ExchangeBroker | MemoryBroker:
    """The broker ``config.url`` names: ``memory://`` or RabbitMQ (``amqp://``, ``amqps://``)."""
    if config.is_memory:
        return MemoryBroker(config=config, namespace=namespace, middleware=middleware)
    return ExchangeBroker(config=config, namespace=namespace, middleware=middleware)
