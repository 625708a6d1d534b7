"""The metrics process's queue sampling: depths from RabbitMQ, and the age bound autoscalers use."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from pipelines.exposition import QueueDepths


class Heads(Collector):
    """What the worker processes wrote: when the newest started message of each queue was published."""

    def __init__(self, heads: dict[str, float]) -> None:
        self.registry = CollectorRegistry()
        gauge = Gauge("pipelines_queue_head_published_timestamp_seconds", "", ["queue"], registry=self.registry)
        for queue, value in heads.items():
            gauge.labels(queue).set(value)

    def collect(self) -> list[Metric]:
        return list(self.registry.collect())


def values(depths: QueueDepths, name: str) -> dict[str, float]:
    return {s.labels["queue"]: s.value for m in depths.collect() if m.name == name for s in m.samples}


@pytest.mark.parametrize("backend", ["rabbitmq"], indirect=True)
def test_depths_and_the_oldest_message_age_bound(make_app: Any, tmp_path: Path) -> None:
    app = make_app()
    for name in ("idle", "stalled", "draining"):
        dramatiq.actor(broker=app.broker, actor_name=name)(lambda: None)
    app.broker.ensure_topology()
    queues = app.broker.topology.actor_queues
    for name in ("stalled", "draining"):
        app.broker.enqueue_many([app.broker.get_actor(name).message() for _ in range(3)])
    listing = tmp_path / "queues.json"
    listing.write_text(json.dumps([{"name": q, "role": "actor"} for q in queues.values()]))
    now = time.time()
    depths = QueueDepths(
        url=app.settings.broker.url, listing=listing, interval_s=1, samples=Heads({queues["draining"]: now - 5})
    )

    depths.sample()
    depths.nonempty_since[queues["stalled"]] = now - 600  # seen non-empty ten minutes ago, nobody consumed
    depths.nonempty_since[queues["draining"]] = now - 600

    assert values(depths, "pipelines_queue_depth") == {queues["idle"]: 0, queues["stalled"]: 3, queues["draining"]: 3}
    age = values(depths, "pipelines_queue_oldest_message_age_seconds")
    assert age[queues["idle"]] == 0
    assert 600 <= age[queues["stalled"]] < 700
    assert 5 <= age[queues["draining"]] < 100  # a worker started a message published 5 s ago
