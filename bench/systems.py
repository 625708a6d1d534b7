"""The four systems under test, behind one small interface: start workers, send work, count it done.

Producers run in the benchmark process; workers are the systems' own CLIs (`dramatiq`, `celery`) or a
minimal pika consumer, all with the same shape (processes x threads).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import pika

from bench.common import AMQP_URL, BIN, NAMESPACE, PROCESSES, REDIS_URL, THREADS, Worker, base_env
from bench.postgres import POSTGRES_URL
from pipelines.app import App, build_app
from tests.support.ports import free_port

#: The module our workers run, which builds the app from ``PIPELINES_*`` and declares the actors.
OURS_WORKER = "bench.ours_worker"


def _postgres_producer(schema: str) -> tuple[App, Any]:
    """The producer side of a PostgreSQL store variant: an app of its own, configured as the first system's
    but for its store, on the same queues (the namespace is the same: no more queues on the broker), and
    the actors declared again on its broker."""
    if OURS_WORKER not in sys.modules:
        raise RuntimeError("Build the Redis store's system first: its configuration is the one the variant changes.")
    worker_module: Any = sys.modules[OURS_WORKER]
    app = build_app(worker_module.app.settings.with_overrides(store={"url": POSTGRES_URL, "postgres_schema": schema}))
    return app, worker_module.declare_actors(app.broker)


class System(Protocol):
    name: str

    def worker(self, log: Path) -> Worker: ...

    def noops(self, key: str, n: int) -> None: ...

    def purge(self) -> None: ...


def _purge(*queues: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        channel = connection.channel()
        for queue in queues:
            try:
                channel.queue_purge(queue)
            except pika.exceptions.ChannelClosedByBroker:
                channel = connection.channel()


#: The queues the other systems declare (Dramatiq's with its delay and dead-letter queues, Celery's, pika's).
OTHER_SYSTEMS_QUEUES = ("bench_bare", "bench_bare.DQ", "bench_bare.XQ", "bench_celery", "bench_raw")


def delete_other_systems_queues() -> None:
    """Delete the queues of the systems compared against, so a run leaves the broker as it found it."""
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        for queue in OTHER_SYSTEMS_QUEUES:
            connection.channel().queue_delete(queue)


class Ours:
    """rabbit-pipelines with its full default middleware, tracing exported to a local receiver (at the
    shipped sampling unless ``sample_ratio`` is given), metrics; its runs stored in Redis, or in
    PostgreSQL in the schema ``postgres_schema`` names (which the run must drop at its end)."""

    name = "rabbit-pipelines"

    def __init__(
        self,
        otlp_endpoint: str,
        *,
        tracing: bool = True,
        sample_ratio: float | None = None,
        name: str | None = None,
        wait_for_replicas: int = 0,
        local_steps: bool = True,
        postgres_schema: str | None = None,
        start_each: bool = False,
    ) -> None:
        self.name = name or self.name
        self.start_each = start_each
        """The chains case starts each chain with its own ``app.start`` (else all with one ``start_many``)."""
        self.metrics_dir = tempfile.mkdtemp(prefix="bench-metrics-")
        self.counters_dir = Path(tempfile.mkdtemp(prefix="bench-counters-"))
        ratio = {} if sample_ratio is None else {"PIPELINES_TELEMETRY__SAMPLE_RATIO": str(sample_ratio)}
        store = (
            {"PIPELINES_STORE__URL": POSTGRES_URL, "PIPELINES_STORE__POSTGRES_SCHEMA": postgres_schema}
            if postgres_schema
            else {"PIPELINES_STORE__URL": REDIS_URL, "PIPELINES_STORE__WAIT_FOR_REPLICAS": str(wait_for_replicas)}
        )
        self.env = (
            base_env()
            | ratio
            | store
            | {
                "PIPELINES_NAMESPACE": NAMESPACE,
                "PIPELINES_BROKER__URL": AMQP_URL,
                "PIPELINES_TELEMETRY__ENABLED": "true" if tracing else "false",
                "PIPELINES_TELEMETRY__ENDPOINT": otlp_endpoint,
                "PIPELINES_METRICS__ENABLED": "true",
                "PIPELINES_METRICS__PORT": str(free_port()),
                "PIPELINES_METRICS__MULTIPROCESS_DIR": self.metrics_dir,
                "PIPELINES_LOGGING__LEVEL": "WARNING",
                "PIPELINES_WORKER__LOCAL_STEPS": "true" if local_steps else "false",
                "BENCH_COUNTERS_DIR": str(self.counters_dir),
            }
        )
        # The producer side: this process builds the same app and declares the same actors (the first
        # system built sets its configuration; a variant shares it and differs in its workers only).
        self.app: Any
        self.actors: Any
        if postgres_schema:
            self.app, self.actors = _postgres_producer(postgres_schema)
            return
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("PIPELINES_")})
        os.environ["BENCH_REDIS_URL"] = REDIS_URL
        worker_module: Any = importlib.import_module(OURS_WORKER)
        self.app, self.actors = worker_module.app, worker_module.actors

    def worker(self, log: Path) -> Worker:
        for stale in self.counters_dir.glob("*.json"):
            stale.unlink()
        command = [str(BIN / "dramatiq"), "bench.ours_worker:broker", "-p", str(PROCESSES), "-t", str(THREADS)]
        return Worker([command], self.env, log)

    def worker_counts(self) -> dict[str, int]:
        """Publishes and confirm waits of the last worker's processes over their lives, once it stopped."""
        totals = {"publishes": 0, "confirm_waits": 0}
        for path in self.counters_dir.glob("*.json"):
            for name, count in json.loads(path.read_text()).items():
                totals[name] += count
        return totals

    def noops(self, key: str, n: int) -> None:
        messages = [self.actors.noop.message(key) for _ in range(n)]
        for start in range(0, n, 2000):
            self.app.broker.enqueue_many(messages[start : start + 2000])

    def purge(self) -> None:
        self.app.broker.ensure_topology()
        self.app.broker.flush_all()


class BareDramatiq:
    """Dramatiq 2.x's RabbitmqBroker with its default middleware (and GroupCallbacks for chords)."""

    name = "dramatiq"

    def __init__(self) -> None:
        self.env = base_env()
        os.environ["BENCH_AMQP_URL"] = AMQP_URL
        os.environ["BENCH_REDIS_URL"] = REDIS_URL
        self.module: Any = importlib.import_module("bench.bare_worker")

    def worker(self, log: Path) -> Worker:
        command = [str(BIN / "dramatiq"), "bench.bare_worker:broker", "-p", str(PROCESSES), "-t", str(THREADS)]
        return Worker([command], self.env, log)

    def noops(self, key: str, n: int) -> None:
        for _ in range(n):
            self.module.noop.send(key)

    def purge(self) -> None:
        _purge("bench_bare", "bench_bare.DQ", "bench_bare.XQ")


class Celery:
    """Celery 5 with the RabbitMQ broker, Redis result backend, a threads pool of the same size."""

    name = "celery"

    def __init__(self) -> None:
        self.env = base_env()
        self.module: Any = importlib.import_module("bench.celery_app")

    def worker(self, log: Path) -> Worker:
        # Worker processes of one threads pool each: the same shape as the others.
        commands = [
            [
                *(str(BIN / "celery"), "-A", "bench.celery_app", "worker", "-P", "threads", "-c", str(THREADS)),
                *("-n", f"w{i}-{uuid.uuid4().hex[:6]}@%h", "--without-gossip", "--without-mingle"),
                *("--without-heartbeat", "-l", "WARNING"),
            ]
            for i in range(PROCESSES)
        ]
        return Worker(commands, self.env, log)

    def noops(self, key: str, n: int) -> None:
        for _ in range(n):
            self.module.noop.apply_async((key,))

    def purge(self) -> None:
        _purge("bench_celery")


class RawPika:
    """A minimal pika consumer and publisher: the floor, not a framework."""

    name = "pika"
    queue = "bench_raw"

    def __init__(self) -> None:
        self.env = base_env() | {"BENCH_PROCESSES": str(PROCESSES), "BENCH_THREADS": str(THREADS)}

    def worker(self, log: Path) -> Worker:
        return Worker([[str(BIN / "python"), "-m", "bench.pika_worker"]], self.env, log)

    @contextmanager
    def channel(self) -> Iterator[Any]:
        with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
            channel = connection.channel()
            channel.queue_declare(self.queue, durable=True)
            yield channel

    def noops(self, key: str, n: int) -> None:
        with self.channel() as channel:
            properties = pika.BasicProperties(delivery_mode=2)
            for _ in range(n):
                channel.basic_publish("", self.queue, key.encode(), properties)

    def purge(self) -> None:
        _purge(self.queue)
