"""Fixtures shared by the whole suite.

Integration tests run against the real RabbitMQ and Redis (URLs from ``PIPELINES_TEST_AMQP_URL`` and
``PIPELINES_TEST_REDIS_URL``, loopback by default), each test in a namespace of its own that is
deleted afterwards (``tests/housekeeping.py``: a run also deletes what interrupted earlier runs left, the
first time a test needs the services; ``PIPELINES_TEST_RABBITMQCTL`` names the broker's ``rabbitmqctl``
when it is not the one on the PATH). Behaviour tests take the ``backend`` parameter and run on both the embedded
(memory) and the real services.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import dramatiq
import pika
import pytest
from opentelemetry.sdk.trace.export import SpanExporter

from pipelines.app import App, build_app
from pipelines.broker import ExchangeBroker
from pipelines.config import Settings
from pipelines.store import RedisRunStore
from pipelines.testing import boot
from tests.housekeeping import delete_stale_namespaces, fresh_namespace, listed, rabbitmqctl, stop_leftover_processes

AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "localhost", parts.port or 0), timeout=2).close()
    except OSError:
        return False
    return True


def pytest_report_header() -> list[str]:
    """The versions of the services this run tests against (the README says which ones compose pins)."""
    found = []
    try:
        parameters = pika.URLParameters(AMQP_URL)
        parameters.connection_attempts, parameters.socket_timeout = 1, 2
        with pika.BlockingConnection(parameters) as connection:
            # pika keeps the broker's connection.start properties on the connection it wraps.
            properties = connection._impl.server_properties
        found.append(f"RabbitMQ {properties.get('version')} ({properties.get('platform')})")
    except pika.exceptions.AMQPError as e:
        found.append(f"RabbitMQ not answering ({type(e).__name__})")
    import redis

    try:
        found.append(f"Redis {redis.Redis.from_url(REDIS_URL, socket_timeout=2).info('server')['redis_version']}")
    except redis.RedisError as e:
        found.append(f"Redis not answering ({type(e).__name__})")
    return [f"services: {', '.join(found)}"]


@pytest.fixture(scope="session")
def services() -> None:
    """Fail (never skip) when RabbitMQ or Redis does not answer, naming the one that is missing; then
    clear what interrupted earlier runs left: their processes and their namespaces."""
    missing = [name for name, url in (("RabbitMQ", AMQP_URL), ("Redis", REDIS_URL)) if not _answers(url)]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not answering ({AMQP_URL.split('@')[-1]}, {REDIS_URL}). "
            "Run `make services` or `docker compose up -d rabbitmq redis`.",
            pytrace=False,
        )
    stop_leftover_processes()
    try:
        delete_stale_namespaces(AMQP_URL, REDIS_URL)
    except (OSError, subprocess.CalledProcessError) as e:  # no rabbitmqctl here (a broker in a container)
        warnings.warn(
            f"Stale test namespaces were not deleted: cannot list the broker's queues ({e}). "
            "Set PIPELINES_TEST_RABBITMQCTL to its rabbitmqctl command.",
            stacklevel=1,
        )


TEST_DELAY_TIERS_S = [0.1, 0.5, 1.0, 5.0, 30.0]


def settings_for(backend: str, **sections: Any) -> Settings:
    """Settings of a fresh namespace on ``backend`` ("memory" or "rabbitmq"), with section overrides."""
    data: dict[str, Any] = {"namespace": fresh_namespace()}
    if backend == "memory":
        data |= {"broker": {"url": "memory://"}, "store": {"url": "memory://"}}
    else:
        # Half the default delay tiers: each namespace declares fewer quorum queues (longer waits
        # hop through the 30 s tier), which keeps the suite's churn on RabbitMQ's Raft log down.
        data |= {"broker": {"url": AMQP_URL, "delay_tiers_s": TEST_DELAY_TIERS_S}, "store": {"url": REDIS_URL}}
    data["retries"] = {"max_retries": 0, "min_backoff_s": 0.05, "max_backoff_s": 0.2}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    return Settings.from_values(data)


def cleanup(app: App) -> None:
    """Delete everything the app's namespace created in RabbitMQ and Redis, then close it."""
    if isinstance(app.broker, ExchangeBroker):
        app.broker.delete_topology()
    if isinstance(app.store, RedisRunStore):
        app.store.delete_namespace()
    app.close()


def _delete_namespace(namespace: str) -> None:
    """Delete every queue and exchange named ``<namespace>.*`` (whatever declared them) and its Redis keys."""
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as connection:
        channel = connection.channel()
        for queue in listed("list_queues"):
            if queue.startswith(f"{namespace}."):
                channel.queue_delete(queue)
        for exchange in listed("list_exchanges"):
            if exchange.startswith(f"{namespace}."):
                channel.exchange_delete(exchange)
    RedisRunStore(url=REDIS_URL, namespace=namespace, retention_s=60).delete_namespace()


@pytest.fixture(scope="session")
def delete_namespace(services: None) -> Callable[[str], None]:
    """Deletes every queue and exchange named ``<namespace>.*`` and the namespace's Redis keys."""
    return _delete_namespace


@pytest.fixture
def namespaces(delete_namespace: Callable[[str], None]) -> Iterator[Callable[[], str]]:
    """Hands out fresh namespaces for other processes to use; deletes all they created afterwards."""
    handed_out: list[str] = []

    def fresh() -> str:
        handed_out.append(fresh_namespace())
        return handed_out[-1]

    yield fresh
    for namespace in handed_out:
        delete_namespace(namespace)


@pytest.fixture(params=["memory", "rabbitmq"])
def backend(request: pytest.FixtureRequest) -> str:
    """Runs a behaviour test on the embedded broker and store, then on RabbitMQ and Redis."""
    if request.param == "rabbitmq":
        request.getfixturevalue("services")
    return str(request.param)


MakeApp = Callable[..., App]


@pytest.fixture
def make_app(backend: str) -> Iterator[MakeApp]:
    """Factory of apps on ``backend``, each in its own namespace, all cleaned up after the test."""
    apps: list[App] = []

    def make(span_exporter: SpanExporter | None = None, **sections: Any) -> App:
        app = build_app(settings_for(backend, **sections), span_exporter=span_exporter)
        apps.append(app)
        return app

    yield make
    # Every app's namespace, even when one cleanup fails (the first failure is raised afterwards).
    failures: list[Exception] = []
    for app in apps:
        try:
            cleanup(app)
        except Exception as e:  # re-raised below, after the other namespaces are gone
            failures.append(e)
    if failures:
        raise failures[0]


StartWorker = Callable[..., dramatiq.Worker]


@pytest.fixture
def start_worker(make_app: MakeApp) -> Iterator[StartWorker]:
    """Starts a worker for an app's declared actors (declare them first); stopped after the test."""
    workers: list[dramatiq.Worker] = []

    def start(app: App, *, threads: int = 4) -> dramatiq.Worker:
        boot(app)
        worker = dramatiq.Worker(app.broker, worker_threads=threads, worker_timeout=100)
        worker.start()
        workers.append(worker)
        return worker

    yield start
    # Every worker, even when stopping one fails (the first failure is raised afterwards).
    failures: list[Exception] = []
    for worker in workers:
        try:
            worker.stop()
        except Exception as e:  # re-raised below, after the other workers stopped
            failures.append(e)
    if failures:
        raise failures[0]


class Observer(dramatiq.Middleware):
    """Counts every message the worker finished handling, by actor, so tests await counts, not time.

    It is the first middleware, so its ``after_*`` hooks run last: once a count is reached, every other
    middleware has recorded what it decided about those messages (metrics, the run store, spans).
    """

    def __init__(self) -> None:
        self.handled: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.dead_lettered: dict[str, int] = {}
        self._changed = threading.Condition()

    def _count(self, table: dict[str, int], message: dramatiq.broker.MessageProxy) -> None:
        with self._changed:
            table[message.actor_name] = table.get(message.actor_name, 0) + 1
            self._changed.notify_all()

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._count(self.handled, message)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._count(self.handled, message)
        self._count(self.skipped, message)

    def after_nack(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._count(self.dead_lettered, message)

    def _wait(self, table: dict[str, int], what: str, actor_name: str, count: int, timeout_s: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: table.get(actor_name, 0) >= count, timeout_s):
                raise AssertionError(f"only {table.get(actor_name, 0)} of {count} messages of {actor_name} {what}")

    def wait_handled(self, actor_name: str, count: int, timeout_s: float = 30) -> None:
        """Block until ``count`` messages of ``actor_name`` were handled (run or skipped)."""
        self._wait(self.handled, "were handled", actor_name, count, timeout_s)

    def wait_dead_lettered(self, actor_name: str, count: int, timeout_s: float = 30) -> None:
        """Block until ``count`` messages of ``actor_name`` were rejected to their dead-letter queue."""
        self._wait(self.dead_lettered, "were dead-lettered", actor_name, count, timeout_s)


@pytest.fixture
def observe() -> Callable[[App], Observer]:
    """Attaches an :class:`Observer` to an app's broker (before its worker starts), first in its middleware."""

    def attach(app: App) -> Observer:
        observer = Observer()
        app.broker.add_middleware(observer, before=type(app.broker.middleware[0]))
        return observer

    return attach


#: The RabbitMQ consumer timeout tests lower the server's to, in ms.
SHORT_CONSUMER_TIMEOUT_MS = 2000


def set_rabbit(name: str, value: int) -> None:
    """Change a setting of the running RabbitMQ server."""
    subprocess.run(
        [*rabbitmqctl(), "-q", "eval", f"application:set_env(rabbit, {name}, {value})."],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def short_consumer_timeout(services: None) -> Iterator[int]:
    """RabbitMQ's consumer timeout lowered to SHORT_CONSUMER_TIMEOUT_MS, checked every second, for one test.

    A delivery left unacknowledged longer has its channel closed and is redelivered.
    """
    set_rabbit("consumer_timeout", SHORT_CONSUMER_TIMEOUT_MS)
    set_rabbit("channel_tick_interval", 1000)
    yield SHORT_CONSUMER_TIMEOUT_MS
    set_rabbit("consumer_timeout", 1_800_000)
    set_rabbit("channel_tick_interval", 60_000)
