"""The metrics process of a `dramatiq` worker: one port for every worker process's samples.

Started by the `dramatiq` CLI (``Metrics.forks``) in a process of its own. It serves the samples the
worker processes write in prometheus-client's multiprocess directory, counts the worker processes
whose heartbeat is recent, and samples every queue's and dead-letter queue's depth from RabbitMQ on an
interval (never per message).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from middleware.metrics import MULTIPROC_ENV, multiprocess_dir
from pipelines.app import App, configure
from pipelines.config import load_settings

logger = logging.getLogger(__name__)

#: A worker process counts as alive while its heartbeat is younger than this many intervals.
HEARTBEATS_BEFORE_DEAD = 3


class QueueDepths(Collector):
    """``pipelines_queue_depth`` and ``pipelines_dead_letter_depth``, sampled on an interval."""

    def __init__(self, app: App, interval_s: float) -> None:
        self.app = app
        self.interval_s = interval_s
        self.depths: dict[str, tuple[str, int]] = {}
        self._stop = threading.Event()

    def sample(self) -> None:
        depth = getattr(self.app.broker, "queue_depth", None)
        if depth is None:
            return
        for queue in self.app.broker.topology.queues:
            if queue.role == "delay":
                continue
            try:
                count = depth(queue.name)
            except Exception:  # a broker hiccup skips one sample; the next interval tries again
                logger.warning("Could not sample the depth of %s.", queue.name, exc_info=True)
                continue
            if count is not None:
                self.depths[queue.name] = (queue.role, count)

    def run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def collect(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily("pipelines_queue_depth", "Messages ready in each actor queue.", labels=["queue"])
        dead = GaugeMetricFamily("pipelines_dead_letter_depth", "Messages in each dead-letter queue.", labels=["queue"])
        for name, (role, count) in sorted(self.depths.items()):
            (dead if role == "dead-letter" else ready).add_metric([name], count)
        yield ready
        yield dead


class LiveWorkers(Collector):
    """``pipelines_workers``: worker processes whose heartbeat is recent."""

    def __init__(self, samples: MultiProcessCollector, interval_s: float) -> None:
        self.samples = samples
        self.interval_s = interval_s

    def collect(self) -> Iterator[Metric]:
        horizon = time.time() - HEARTBEATS_BEFORE_DEAD * self.interval_s
        beats = [
            sample.value
            for metric in self.samples.collect()  # type: ignore[no-untyped-call]
            if metric.name == "pipelines_worker_heartbeat_timestamp_seconds"
            for sample in metric.samples
        ]
        alive = sum(1 for beat in beats if beat >= horizon)
        gauge = GaugeMetricFamily("pipelines_workers", "Worker processes with a recent heartbeat.")
        gauge.add_metric([], alive)
        yield gauge


def serve() -> int:
    """Serve the metrics until the CLI stops this process (it never returns on its own)."""
    settings = load_settings()
    app = configure(settings)
    importlib.import_module(settings.app.actors)  # the actors tell which queues there are
    directory = multiprocess_dir(settings.metrics, settings.namespace)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)

    registry = CollectorRegistry()
    samples = MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    registry.register(LiveWorkers(samples, settings.metrics.heartbeat_interval_s))
    depths = QueueDepths(app, settings.metrics.queue_sample_interval_s)
    registry.register(depths)
    threading.Thread(target=depths.run, name="pipelines-queue-depths", daemon=True).start()
    start_http_server(settings.metrics.port, settings.metrics.host, registry=registry)
    logger.info("Serving metrics on %s:%d.", settings.metrics.host, settings.metrics.port)
    forever = threading.Event()
    forever.wait()
    return 0
