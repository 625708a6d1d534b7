"""The metrics process of a `dramatiq` worker: one port for every worker process's samples.

Started by the `dramatiq` CLI (``Metrics.forks``) in a process of its own, kept light on purpose: it
imports neither Dramatiq nor the actors. It serves the samples the worker processes write in
prometheus-client's multiprocess directory, counts the worker processes whose heartbeat is recent,
and samples the depth of every queue the workers listed (``queues.json``) from RabbitMQ on an interval,
never per message, with a bound on the age of each queue's oldest message (for autoscalers).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from pipelines.config.settings import load_settings
from pipelines.config.urls import without_client_checks
from pipelines.observability.metrics_dir import MULTIPROC_ENV, QUEUES_FILE, dramatiq_master, group_dir
from pipelines.observability.metrics_http import serve_http

logger = logging.getLogger(__name__)

#: A worker process counts as alive while its heartbeat is younger than this many intervals.
HEARTBEATS_BEFORE_DEAD = 3
#: Exit status of a metrics process that could not listen (sysexits' EX_CONFIG).
EXIT_CONFIG = 78


class GroupSamples(MultiProcessCollector):
    """The samples of the group's processes, without the gauges of processes that have exited.

    Counters of an exited process stay (a total never goes back); its live gauges (heartbeat, in
    flight) go, whether it exited cleanly (``mark_process_dead`` at shutdown) or was killed.
    """

    def __init__(self, registry: CollectorRegistry | None, path: str) -> None:
        super().__init__(registry, path=path)  # type: ignore[no-untyped-call]
        self.path = path

    def collect(self) -> Iterator[Metric]:
        for pid in _dead_pids(Path(self.path)):
            mark_process_dead(pid, self.path)  # type: ignore[no-untyped-call]
        return super().collect()  # type: ignore[no-any-return,no-untyped-call]


def _dead_pids(directory: Path) -> set[int]:
    pids = set()
    for file in directory.glob("gauge_live*_*.db"):
        try:
            pid = int(file.stem.rsplit("_", 1)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            pids.add(pid)
        except (ValueError, PermissionError):
            continue
    return pids


class QueueDepths(Collector):
    """``pipelines_queue_depth``, ``pipelines_dead_letter_depth`` and the age of each queue's oldest message.

    RabbitMQ does not say how old a queue's oldest message is (reading it would count as a delivery),
    so the age is bounded from what is known: the messages waiting were published after the newest one
    a worker started from the queue, and after the queue was last seen empty. The later of the two is
    the bound: zero for an empty queue, growing while nobody consumes — what an autoscaler needs.
    """

    def __init__(self, *, url: str, listing: Path, interval_s: float, samples: Collector | None = None) -> None:
        self.url = url
        self.listing = listing
        self.interval_s = interval_s
        self.samples = samples
        self.depths: dict[str, tuple[str, int]] = {}
        self.nonempty_since: dict[str, float] = {}
        self._channel: Any = None

    def _depth(self, queue: str) -> int | None:
        if self._channel is None or not self._channel.is_open:
            nodes = [pika.URLParameters(node) for node in self.url.split(",")]
            self._channel = pika.BlockingConnection(nodes).channel()
        try:
            return int(self._channel.queue_declare(queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            return None  # not declared (yet); the channel reopens next time

    def sample(self) -> None:
        try:
            queues = json.loads(self.listing.read_text())
        except (OSError, ValueError):
            return  # no worker has listed its queues yet
        for queue in queues:
            try:
                count = self._depth(queue["name"])
            except Exception:  # a broker hiccup skips one sample; the next interval tries again
                logger.warning("Could not sample the depth of %s.", queue["name"], exc_info=True)
                self._channel = None
                continue
            if count is not None:
                self.depths[queue["name"]] = (queue["role"], count)
                if count == 0:
                    self.nonempty_since.pop(queue["name"], None)
                else:
                    self.nonempty_since.setdefault(queue["name"], time.time())

    def run(self) -> None:
        while True:
            self.sample()
            time.sleep(self.interval_s)

    def collect(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily("pipelines_queue_depth", "Messages ready in each actor queue.", labels=["queue"])
        dead = GaugeMetricFamily("pipelines_dead_letter_depth", "Messages in each dead-letter queue.", labels=["queue"])
        age = GaugeMetricFamily(
            "pipelines_queue_oldest_message_age_seconds",
            "Upper bound of the age of each actor queue's oldest ready message (0 when empty).",
            labels=["queue"],
        )
        heads = self._heads()
        now = time.time()
        for name, (role, count) in sorted(self.depths.items()):
            (dead if role == "dead-letter" else ready).add_metric([name], count)
            if role != "dead-letter":
                since = max(heads.get(name, 0.0), self.nonempty_since.get(name, now))
                age.add_metric([name], max(0.0, now - since) if count else 0.0)
        yield ready
        yield dead
        yield age

    def _heads(self) -> dict[str, float]:
        if self.samples is None:
            return {}
        return {
            sample.labels["queue"]: sample.value
            for metric in self.samples.collect()
            if metric.name == "pipelines_queue_head_published_timestamp_seconds"
            for sample in metric.samples
        }


class LiveWorkers(Collector):
    """``pipelines_workers``: worker processes whose heartbeat is recent."""

    def __init__(self, samples: MultiProcessCollector, interval_s: float) -> None:
        self.samples = samples
        self.interval_s = interval_s

    def count(self) -> int:
        horizon = time.time() - HEARTBEATS_BEFORE_DEAD * self.interval_s
        beats = [
            sample.value
            for metric in self.samples.collect()  # type: ignore[no-untyped-call]
            if metric.name == "pipelines_worker_heartbeat_timestamp_seconds"
            for sample in metric.samples
        ]
        return sum(1 for beat in beats if beat >= horizon)

    def problem(self) -> str | None:
        """For ``/healthz``: healthy while a worker process has a recent heartbeat."""
        return None if self.count() else "no worker process has sent a heartbeat recently"

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("pipelines_workers", "Worker processes with a recent heartbeat.")
        gauge.add_metric([], self.count())
        yield gauge


def serve() -> int:
    """Serve the metrics until the CLI stops this process (returns only when it cannot listen)."""
    with without_client_checks():  # the worker processes checked the store's URL as redis-py reads it
        settings = load_settings()
    directory = group_dir(settings.metrics, settings.namespace, dramatiq_master() or os.getppid())
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)

    registry = CollectorRegistry()
    samples = GroupSamples(registry, path=str(directory))
    workers = LiveWorkers(samples, settings.metrics.heartbeat_interval_s)
    registry.register(workers)
    depths = QueueDepths(
        url=",".join(settings.broker.node_urls),
        listing=directory / QUEUES_FILE,
        interval_s=settings.metrics.queue_sample_interval_s,
        samples=samples,
    )
    registry.register(depths)
    host, port = settings.metrics.host, settings.metrics.port
    try:
        serve_http(host, port, registry, namespace=settings.namespace, health=workers.problem)
    except OSError as e:
        # Taken since the worker checked it at boot: stop the whole worker rather than run unobserved.
        logger.error("Cannot serve metrics on %s:%d (%s); stopping the worker.", host, port, e.strerror or e)
        os.kill(os.getppid(), signal.SIGTERM)
        return EXIT_CONFIG
    threading.Thread(target=depths.run, name="pipelines-queue-depths", daemon=True).start()
    logger.info("Serving metrics on %s:%d (health on /healthz).", host, port)
    threading.Event().wait()
    return 0
