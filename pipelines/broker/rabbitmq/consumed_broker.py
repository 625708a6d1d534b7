"""What a RabbitMQ consumer needs of its broker, as a Protocol: the consumer (``consuming``) and its
dead-lettering (``dead_lettering``) are handed the broker, and need not import it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import dramatiq

from pipelines.broker.rabbitmq.dead_lettering import DeadLetteringBroker

if TYPE_CHECKING:
    from pipelines.broker.rabbitmq.connections import Connections
    from pipelines.config.sections import BrokerConfig


class ConsumedBroker(DeadLetteringBroker, Protocol):
    """What a consumer needs of its broker: connections, declarations, the actors, delays, its own end."""

    @property
    def thread_connections(self) -> Connections: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def actors(self) -> dict[str, dramatiq.Actor[Any, Any]]: ...

    def ensure_topology(self) -> None: ...

    def forget_declarations(self) -> None: ...

    def redelay(self, message: dramatiq.Message[Any], eta_ms: int) -> None: ...

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]: ...

    def forget_consumer(self, consumer: dramatiq.broker.Consumer) -> None:
        """A consumer closed: the broker no longer keeps it."""
        ...
