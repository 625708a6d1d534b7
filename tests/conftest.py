"""Fixtures shared by the whole suite.

Integration tests run against the real RabbitMQ, Redis and PostgreSQL (URLs from
``PIPELINES_TEST_AMQP_URL``, ``PIPELINES_TEST_REDIS_URL`` and ``PIPELINES_TEST_POSTGRES_URL``, loopback
by default), each test in a namespace of its own that is
deleted afterwards (``tests/support/housekeeping.py``: a run also deletes what interrupted earlier runs left, the
first time a test needs the services; ``PIPELINES_TEST_RABBITMQCTL`` names the broker's ``rabbitmqctl``
when it is not the one on the PATH, ``PIPELINES_TEST_RABBITMQ_API`` its management API, used when
``rabbitmqctl`` cannot be run). Behaviour tests take the ``backend`` parameter: a broker kind and a
store kind (``tests/support/backends.py``, the two axes a new backend joins), by default each kind with its
partner (the embedded broker and store; RabbitMQ and Redis). The fixtures' types are in ``tests/support/fixtures.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import socket
import subprocess
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import pika
import psycopg
import pytest
import redis
from opentelemetry.sdk.trace.export import SpanExporter

from pipelines.app import App, build_app
from pipelines.broker import ExchangeBroker
from pipelines.config.settings import Settings
from tests.support.backends import AMQP_URL, PAIRED, POSTGRES_URL, REDIS_URL, Backend
from tests.support.broker_witness import PublishCounts, vhost_of
from tests.support.fixtures import MakeApp, Observe, Observer, StartWorker
from tests.support.housekeeping import (
    ListingUnavailable,
    delete_stale_namespaces,
    delete_stale_schemas,
    delete_store,
    delete_test_namespace,
    delete_vhost,
    fresh_namespace,
    make_traced_vhost,
    rabbitmqctl,
    stop_leftover_processes,
)
from tests.support.in_process_workers import InProcessWorkers
from tests.support.own_postgres import OwnPostgres, OwnReplicatedPostgres, missing_binaries
from tests.support.stuck_servers import StuckServer

ClusterT = TypeVar("ClusterT", OwnPostgres, OwnReplicatedPostgres)


def _import_anyio_whole() -> None:
    """Import every module of anyio now, in the main thread, before a test starts a server thread.

    pytest rewrites the asserts of every module of a distribution that ships a pytest plugin, and anyio
    does, so each of its modules is compiled from source when first imported. anyio imports its modules
    on first use, which in the console's tests happens in uvicorn's thread; CPython before 3.11.8
    (gh-106905) can fail a compile with ``SystemError: AST constructor recursion depth mismatch`` when
    another thread compiles at the same moment, and the console then drops the connection.
    """
    for module in pkgutil.walk_packages(anyio.__path__, "anyio."):
        with contextlib.suppress(ImportError):  # a backend whose library is not installed (trio)
            importlib.import_module(module.name)


_import_anyio_whole()


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "localhost", parts.port or 0), timeout=2).close()
    except OSError:
        return False
    return True


def _postgres_problem() -> str | None:
    """Why the tests' PostgreSQL database cannot be used, or None."""
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=5).close()
    except psycopg.Error as e:
        return str(e).strip().splitlines()[0]
    return None


def pytest_report_header() -> list[str]:
    """The versions of the services this run tests against (the production guide says which ones compose pins)."""
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
    try:
        found.append(f"Redis {redis.Redis.from_url(REDIS_URL, socket_timeout=2).info('server')['redis_version']}")
    except redis.RedisError as e:
        found.append(f"Redis not answering ({type(e).__name__})")
    return [f"services: {', '.join(found)}"]


@pytest.fixture(scope="session")
def services() -> None:
    """Fail (never skip) when RabbitMQ, Redis or PostgreSQL does not answer, naming the one that is
    missing; then clear what interrupted earlier runs left: their processes and their namespaces."""
    missing = [name for name, url in (("RabbitMQ", AMQP_URL), ("Redis", REDIS_URL)) if not _answers(url)]
    postgres = _postgres_problem()
    if postgres is not None:
        missing.append(f"PostgreSQL ({postgres})")
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not answering ({AMQP_URL.split('@')[-1]}, {REDIS_URL}, "
            f"{POSTGRES_URL.split('@')[-1]}). Run `make services` or `docker compose up -d rabbitmq redis postgres`.",
            pytrace=False,
        )
    stop_leftover_processes()
    delete_stale_schemas(POSTGRES_URL)
    try:
        delete_stale_namespaces(AMQP_URL, REDIS_URL)
    except ListingUnavailable as e:
        warnings.warn(f"Stale test namespaces were not deleted: {e}", stacklevel=1)


def settings_for(backend: Backend, **sections: Any) -> Settings:
    """Settings of a fresh namespace on ``backend``'s broker and store, with section overrides."""
    namespace = fresh_namespace()
    data: dict[str, Any] = {"namespace": namespace, **backend.sections(namespace)}
    data["retries"] = {"max_retries": 0, "min_backoff_s": 0.05, "max_backoff_s": 0.2}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    return Settings.from_values(data)


def cleanup(app: App) -> None:
    """Delete everything the app's namespace created in RabbitMQ and its store, then close it."""
    if isinstance(app.broker, ExchangeBroker):
        app.broker.delete_topology()
    delete_store(app.store)
    app.close()


def _delete_namespace(namespace: str) -> None:
    """Delete every queue and exchange named ``<namespace>.*`` (whatever declared them) and its Redis keys."""
    try:
        delete_test_namespace(AMQP_URL, REDIS_URL, namespace)
    except ListingUnavailable as e:
        warnings.warn(f"The queues and exchanges of test namespace {namespace} were not deleted: {e}", stacklevel=1)


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


@pytest.fixture(params=PAIRED, ids=str)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Runs a behaviour test on each pair of ``tests/support/backends.py``'s ``PAIRED`` (or the pairs it is
    marked ``on``)."""
    chosen: Backend = request.param
    if chosen.needs_services:
        request.getfixturevalue("services")
    return chosen


@pytest.fixture
def make_app(backend: Backend) -> Iterator[MakeApp]:
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


@pytest.fixture
def start_worker(make_app: MakeApp) -> Iterator[StartWorker]:
    """Starts a worker for an app's declared actors (declare them first); stopped after the test."""
    workers = InProcessWorkers()
    yield workers.start
    workers.stop_all()


@pytest.fixture(scope="session")
def traced_vhost(services: None) -> Iterator[str]:
    """The AMQP URL of a virtual host of this run with RabbitMQ's firehose tracer on (``rabbitmqctl``),
    deleted after the run (``tests/broker_witness.py``)."""
    try:
        url = make_traced_vhost(AMQP_URL)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.fail(
            f"Counting RabbitMQ's publishes needs its rabbitmqctl ({type(e).__name__}: {e}). Set "
            "PIPELINES_TEST_RABBITMQCTL to it (e.g. `docker compose exec -T rabbitmq rabbitmqctl`).",
            pytrace=False,
        )
    yield url
    delete_vhost(AMQP_URL, vhost_of(url))


@pytest.fixture
def publishes(backend: Backend, request: pytest.FixtureRequest) -> Iterator[PublishCounts]:
    """Counts an app's publishes as its broker does: make the app with ``make_app(**publishes.sections)``
    (on RabbitMQ, in the traced virtual host), then ``publishes(app).count("work")``."""
    traced = request.getfixturevalue("traced_vhost") if backend.broker == "rabbitmq" else None
    counts = PublishCounts(traced)
    yield counts
    counts.close()


@pytest.fixture
def observe() -> Observe:
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


@pytest.fixture
def silent_server() -> Iterator[StuckServer]:
    """A port that takes TCP connections and never answers (a stuck broker), closed after the test."""
    server = StuckServer(close_at_once=False)
    yield server
    server.close()


@pytest.fixture
def closing_server() -> Iterator[StuckServer]:
    """A port that takes TCP connections and closes each at once (a broker still starting)."""
    server = StuckServer(close_at_once=True)
    yield server
    server.close()


@pytest.fixture
def no_rabbitmqctl(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine whose broker runs in a container: no rabbitmqctl to run."""
    monkeypatch.setenv("PIPELINES_TEST_RABBITMQCTL", "rabbitmqctl-not-installed")


def made_here(cluster: ClusterT, *steps: Callable[[], None]) -> Iterator[ClusterT]:
    """``cluster`` once ``steps`` made and started it, closed (and removed) afterwards. Fails (never skips) where
    no PostgreSQL cluster can be made."""
    try:
        problem = missing_binaries()
        if problem is not None:
            pytest.fail(f"This test starts PostgreSQL of its own, and {problem}.", pytrace=False)
        for made in steps:
            made()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """A PostgreSQL cluster of the test's own, which it may stop and restart; removed afterwards."""
    cluster = OwnPostgres()
    yield from made_here(cluster, cluster.init, cluster.start)


@pytest.fixture(scope="module")
def module_postgres() -> Iterator[OwnPostgres]:
    """A PostgreSQL cluster of the module's own, for tests that do not stop it and drop what they make in it."""
    cluster = OwnPostgres()
    yield from made_here(cluster, cluster.init, cluster.start)


@pytest.fixture
def own_replicated_postgres() -> Iterator[OwnReplicatedPostgres]:
    """A PostgreSQL primary and its synchronous standby, of the test's own: it may kill the primary and promote
    the standby. Both are removed afterwards."""
    pair = OwnReplicatedPostgres()
    yield from made_here(pair, pair.start)
