"""Prometheus metrics of workers, correct with ``dramatiq --processes N`` on one port.

Every worker process of one `dramatiq` command writes its samples with prometheus-client's
multiprocess mode into the command's own directory (under ``[metrics] multiprocess_dir``, see
``pipelines.observability.metrics_dir``); one extra process, started by the `dramatiq` CLI through this middleware's
``forks``, serves them all on ``[metrics] port`` and samples queue and dead-letter depths from RabbitMQ
on an interval. Labels stay small and fixed: queue, actor, pipeline, outcome, and the namespace added
when served. An app embedded elsewhere (a test run, a web process) counts in its own memory only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import dramatiq
from dramatiq.middleware import Middleware

from pipelines.config.sections import MetricsConfig
from pipelines.current import get_app
from pipelines.handling.local_deliveries import LocalDelivery
from pipelines.handling.outcome import outcome_of
from pipelines.observability.instruments import instruments, zero_series
from pipelines.observability.metrics_dir import (
    MULTIPROC_ENV,
    QUEUES_FILE,
    dramatiq_master,
    group_dir,
    open_group,
    port_taken,
)
from pipelines.wire import option_values as wire_options

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger(__name__)

#: Exit status of a worker whose metrics port is taken (sysexits' EX_CONFIG).
EXIT_CONFIG = 78


class Metrics(Middleware):
    """Counts, times and gauges messages, runs, workers and schedules (see the module docstring)."""

    #: Observability: its failures are logged and never stop a message (see ``pipelines.handling.guards``).
    fails_open = True

    def __init__(
        self,
        *,
        config: MetricsConfig,
        namespace: str,
        serve: Callable[[], int] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.namespace = namespace
        self._serve = serve
        self._registry = registry
        self._ready = threading.Lock()
        self._started = threading.local()
        self._heartbeat_stop = threading.Event()
        self._booted = False
        self._scheduler_serving = False
        self.instruments: dict[str, Any] = {}

    @property
    def forks(self) -> list[Callable[[], int]]:
        # The `dramatiq` CLI runs each fork, by its import path, in a process of its own.
        return [self._serve] if self._serve is not None else []

    # -- setup ---------------------------------------------------------------------------------------

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        # The `periodiq` scheduler enqueues each tick with `scheduled_at`; it is no worker, so it serves
        # its own small set of metrics: when each job last ticked, and how often it should.
        if "scheduled_at" not in message.options or self._booted:
            return
        self._serve_scheduler(broker)
        self._metric("schedule_last_tick").labels(message.actor_name).set(time.time())

    def _serve_scheduler(self, broker: dramatiq.Broker) -> None:
        with self._ready:
            if self._scheduler_serving:
                return
            self._scheduler_serving = True
        for actor in broker.actors.values():
            interval = schedule_interval_s(actor.options.get("periodic"))
            if interval is not None:
                self._metric("schedule_interval").labels(actor.actor_name).set(interval)
        from pipelines.observability.metrics_http import serve_http

        try:
            serve_http(
                self.config.host,
                self.config.port,
                self._setup_registry(),
                namespace=self.namespace,
                health=lambda: None,
            )
        except OSError as e:
            logger.error(
                "Scheduler metrics not served on %s:%d: %s.", self.config.host, self.config.port, e.strerror or e
            )

    def _setup_registry(self) -> CollectorRegistry:
        self._setup()
        return self.registry

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        self._booted = True
        # A `dramatiq` worker process: samples go to its command's directory, served by the fork. The
        # directory must be known before prometheus-client is first imported in this process.
        master = dramatiq_master() if self.config.multiprocess else None
        if master is not None:
            directory = group_dir(self.config, self.namespace, master)
            if open_group(directory):
                self._check_port()
            os.environ[MULTIPROC_ENV] = str(directory)
        self._setup()

    def _check_port(self) -> None:
        """Stop the worker at boot, with one line, when the metrics process could not listen."""
        problem = port_taken(self.config.host, self.config.port)
        if problem is not None:
            logger.error(
                "Metrics port %s:%d cannot be used (%s): stop what listens there or set [metrics] port "
                "(PIPELINES_METRICS__PORT). The worker stops.",
                self.config.host,
                self.config.port,
                problem,
            )
            raise SystemExit(EXIT_CONFIG)

    def _setup(self) -> dict[str, Any]:
        with self._ready:
            if not self.instruments:
                # Multiprocess mode writes every sample to a file there: a folder named but not made yet
                # (a scheduler's, whose variable no worker has acted on) is made, as workers make theirs.
                if os.environ.get(MULTIPROC_ENV):
                    Path(os.environ[MULTIPROC_ENV]).mkdir(parents=True, exist_ok=True)
                from prometheus_client import CollectorRegistry

                self.registry = self._registry or CollectorRegistry()
                self.instruments = instruments(self.registry)
            return self.instruments

    def _metric(self, name: str) -> Any:
        return (self.instruments or self._setup())[name]

    def _child(self, name: str, *labels: str) -> Any:
        """The labelled child of a metric, looked up once per label set (labels() is not cheap)."""
        children: dict[tuple[str, ...], Any] = self.__dict__.setdefault("_children", {})
        key = (name, *labels)
        child = children.get(key)
        if child is None:
            child = children[key] = self._metric(name).labels(*labels)
        return child

    # -- messages ------------------------------------------------------------------------------------

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._child("in_flight", message.queue_name, message.actor_name).inc()
        self._started.at = time.perf_counter()
        self._head_started(broker, message)
        partition = wire_options.partition(message.options)
        if partition is not None:
            # An ordered partition's processing lag: from publish to the start of processing.
            lag_s = max(0.0, time.time() - message.message_timestamp / 1000)
            self._child("partition_lag", message.actor_name, str(partition)).observe(lag_s)

    def _head_started(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Note when the newest message started from its RabbitMQ queue was published: the messages still
        waiting there are younger, which bounds the age of the oldest (see ``pipelines.observability.exposition``).
        A local step was never in a queue: it says nothing of what waits there."""
        if isinstance(message, LocalDelivery):
            return
        queue = outcome_of(message).queue
        if queue is None:
            topology = getattr(broker, "topology", None)
            queue = topology.actor_queues.get(message.actor_name) if topology is not None else None
        if not queue:
            return
        heads: dict[str, float] = self.__dict__.setdefault("_heads", {})
        published_s = message.message_timestamp / 1000
        if published_s > heads.get(queue, 0):  # a retry of an older message does not move it back
            heads[queue] = published_s
            self._child("queue_head", queue).set(published_s)

    def _finish(self, message: dramatiq.broker.MessageProxy) -> tuple[str, str]:
        labels = (message.queue_name, message.actor_name)
        self._child("in_flight", *labels).dec()
        return labels

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        labels = self._finish(message)
        started = getattr(self._started, "at", None)
        if started is not None:
            self._child("duration", *labels).observe(time.perf_counter() - started)
        self._child("processed", *labels).inc()
        if exception is not None:
            self._child("failed", *labels).inc()
        if outcome_of(message).retry_scheduled:
            self._child("retried", *labels).inc()
        if "scheduled_at" in message.options:
            self._metric("schedule_last_run").labels(message.actor_name).set(time.time())

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        labels = self._finish(message)
        if outcome_of(message).duplicate:
            self._child("duplicates", *labels).inc()

    def after_nack(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        dropped = outcome_of(message).settlement.drop
        self._child("dropped" if dropped else "dead_lettered", message.queue_name, message.actor_name).inc()

    # -- runs (the runtime calls these: see pipelines.flow.runtime.RunListener) ---------------------------

    def run_finished(self, pipeline: str, outcome: Literal["succeeded", "failed"], duration_s: float) -> None:
        self._child("runs", pipeline, outcome).inc()
        self._child("run_duration", pipeline).observe(duration_s)

    def ticks_missed(self, job: str, count: int) -> None:
        """Scheduled ticks of ``job`` that never came (no scheduler ran); see ``middleware.schedules``."""
        self._metric("schedule_missed").labels(job).inc(count)

    def step_hopped(self, actor: str, *, local: bool) -> None:
        self._child("hops", actor, "local" if local else "routed").inc()

    def step_lost(self, actor: str) -> None:
        self._metric("steps_lost").labels(actor).inc()

    def middleware_failed(self, middleware: str, hook: str) -> None:
        self._metric("middleware_failures").labels(middleware, hook).inc()

    def chord_released(self, pipeline: str, wait_s: float) -> None:
        self._metric("chord_wait").labels(pipeline).observe(wait_s)

    # -- worker liveness and schedules ---------------------------------------------------------------

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._publish_queue_names(broker)
        app = get_app()
        zero_series(self._setup(), broker, sorted(app.pipelines) if app is not None else [])
        for actor in broker.actors.values():
            interval = schedule_interval_s(actor.options.get("periodic"))
            if interval is not None:
                self._metric("schedule_interval").labels(actor.actor_name).set(interval)
        self._heartbeat_stop.clear()
        threading.Thread(target=self._beat, name="pipelines-heartbeat", daemon=True).start()

    def _publish_queue_names(self, broker: dramatiq.Broker) -> None:
        """Tell the metrics process which queues to sample (it does not import the actors itself)."""
        topology = getattr(broker, "topology", None)
        if topology is None or not self.config.multiprocess or not os.environ.get(MULTIPROC_ENV):
            return
        queues = [{"name": q.name, "role": q.role} for q in topology.queues if q.role != "delay"]
        target = Path(os.environ[MULTIPROC_ENV]) / QUEUES_FILE
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(queues))
        temporary.replace(target)

    def _beat(self) -> None:
        while True:
            self._metric("heartbeat").set(time.time())
            if self._heartbeat_stop.wait(self.config.heartbeat_interval_s):
                return

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._heartbeat_stop.set()
        if self.config.multiprocess and os.environ.get(MULTIPROC_ENV):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def schedule_interval_s(spec: Any) -> float | None:
    """Seconds between two ticks of a periodiq cron spec (None for anything else)."""
    if spec is None or not hasattr(spec, "next_valid_date"):
        return None
    import pendulum

    first = spec.next_valid_date(pendulum.now())
    return float((spec.next_valid_date(first) - first).total_seconds())
