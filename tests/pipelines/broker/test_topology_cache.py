"""The topology cache when another thread declares an actor while a topology is built."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, ValuesView
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker

from pipelines.broker.common import TopologyCache
from pipelines.config.sections import BrokerConfig


class DeclaredDuringBuild(Mapping[str, "dramatiq.Actor[Any, Any]"]):
    """Actors to which ``late`` is added right after the cache has read them once, as a worker's
    thread might meet the main thread declaring an actor."""

    def __init__(self, first: dramatiq.Actor[Any, Any], late: dramatiq.Actor[Any, Any]) -> None:
        self._actors = {first.actor_name: first}
        self._late: dramatiq.Actor[Any, Any] | None = late

    def values(self) -> ValuesView[dramatiq.Actor[Any, Any]]:
        snapshot = dict(self._actors).values()
        if self._late is not None:
            self._actors[self._late.actor_name], self._late = self._late, None
        return snapshot

    def __getitem__(self, name: str) -> dramatiq.Actor[Any, Any]:
        return self._actors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._actors)

    def __len__(self) -> int:
        return len(self._actors)


def test_an_actor_declared_while_the_topology_is_built_is_in_the_next_topology() -> None:
    stub = StubBroker()
    first = dramatiq.actor(actor_name="first", queue_name="images", broker=stub)(lambda: None)
    second = dramatiq.actor(actor_name="second", queue_name="mail", broker=stub)(lambda: None)
    actors = DeclaredDuringBuild(first, second)
    cache = TopologyCache(namespace="unit", config=BrokerConfig(url="memory://"))

    built_during = cache.get(actors)
    after = cache.get(actors)

    assert set(built_during.consume_queues) == {"first"}
    assert set(after.consume_queues) == {"first", "second"}
