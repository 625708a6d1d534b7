"""The metrics process's queue sampling: depths from RabbitMQ, and the age bound autoscalers use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import dramatiq
import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from pipelines.broker import ExchangeBroker
from pipelines.observability.exposition import GroupSamples, LiveWorkers, QueueDepths
from pipelines.observability.metrics_http import serve_http
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp
from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port


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


@only_on("rabbitmq")
def test_depths_and_the_oldest_message_age_bound(make_app: MakeApp, tmp_path: Path) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
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

    depth = values(depths, "pipelines_queue_depth")
    assert {q: depth[q] for q in (queues["idle"], queues["stalled"], queues["draining"])} == {
        queues["idle"]: 0,
        queues["stalled"]: 3,
        queues["draining"]: 3,
    }
    age = values(depths, "pipelines_queue_oldest_message_age_seconds")
    assert age[queues["idle"]] == 0
    assert 600 <= age[queues["stalled"]] < 700
    assert 5 <= age[queues["draining"]] < 100  # a worker started a message published 5 s ago


WRITER = """
import sys
from prometheus_client import Counter, Gauge
Gauge("pipelines_worker_heartbeat_timestamp_seconds", "", multiprocess_mode="liveall").set(1.0)
Counter("pipelines_messages_processed", "").inc(3)
print("written", flush=True)
sys.stdin.read()
"""


def test_a_killed_process_loses_its_heartbeat_and_keeps_its_counts(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    writer = start_process(
        [sys.executable, "-c", WRITER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "written\n"
        samples = GroupSamples(None, path=str(tmp_path))
        alive = {m.name: [s.labels for s in m.samples] for m in samples.collect()}
        writer.kill()  # no chance to clean up after itself
        writer.wait(timeout=30)
        dead = {m.name: [(s.labels, s.value) for s in m.samples] for m in samples.collect()}
    finally:
        stop_process(writer)

    assert alive["pipelines_worker_heartbeat_timestamp_seconds"] == [{"pid": str(writer.pid)}]
    assert dead.get("pipelines_worker_heartbeat_timestamp_seconds", []) == []
    assert dead["pipelines_messages_processed"] == [({}, 3.0)]


def test_the_health_path_says_why_a_group_is_unhealthy_and_every_series_carries_the_namespace(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    workers = LiveWorkers(GroupSamples(registry, path=str(tmp_path)), interval_s=1)
    registry.register(workers)
    port = free_port()
    server = serve_http("127.0.0.1", port, registry, namespace="shop", health=workers.problem)
    try:
        with pytest.raises(urllib.error.HTTPError) as unhealthy:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()

    assert unhealthy.value.code == 503
    assert unhealthy.value.read().decode() == "no worker process has sent a heartbeat recently\n"
    assert 'pipelines_workers{pipelines_namespace="shop"} 0.0' in text
