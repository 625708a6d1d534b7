"""The fault suite's fixtures: a namespace, `dramatiq` worker processes to kill, a producer app, a ledger."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.config.settings import Settings
from tests.support.backends import AMQP_URL, REDIS_URL, schema_of

# The worker imports this suite's modules by name; so does the producer.
from tests.support.faults.fault_scenario import Fault
from tests.support.housekeeping import fresh_namespace
from tests.support.own_postgres import OwnPostgres, OwnReplicatedPostgres

#: Leases short enough that work held by a killed worker is taken over within seconds.
LEASE_S = 4
TIME_LIMIT_S = 3
DELIVERY_LIMIT = 2


def scenario(namespace: str, log: Path, **sections: dict[str, Any]) -> Fault:
    """A fault scenario in ``namespace`` with the fault suite's settings, ``sections`` on top (the same
    for the test's producer app and, as PIPELINES_* variables, for its worker processes)."""
    values: dict[str, Any] = {
        "namespace": namespace,
        "broker": {"url": AMQP_URL, "delivery_limit": DELIVERY_LIMIT},
        "store": {"url": REDIS_URL},
        "retries": {"max_retries": 5, "min_backoff_s": 0.05, "max_backoff_s": 0.5},
        "logging": {"format": "text", "level": "WARNING"},
    }
    for section, keys in sections.items():
        values[section] = {**values.get(section, {}), **keys}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {"PIPELINES_NAMESPACE": namespace}
    for section, keys in values.items():
        if isinstance(keys, dict):
            env |= {f"PIPELINES_{section.upper()}__{key.upper()}": str(value) for key, value in keys.items()}
    return Fault(Settings.from_values(values), env, log)


@pytest.fixture
def fault(services: None, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    """A scenario whose leases and time limits are short, so that work a killed worker held is taken
    over within seconds."""
    namespace = fresh_namespace()
    made = scenario(
        namespace,
        tmp_path / "worker.log",
        store={"step_lease_s": LEASE_S},
        worker={"time_limit_s": TIME_LIMIT_S},
    )
    yield made
    made.discard(delete_namespace)


@pytest.fixture
def shipped(services: None, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    """A scenario with the shipped leases and time limits (only the retries are quicker)."""
    namespace = fresh_namespace()
    made = scenario(namespace, tmp_path / "worker.log")
    yield made
    made.discard(delete_namespace)


@pytest.fixture
def renewing(services: None, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    """A scenario whose lease is short and whose time limit is the shipped one: a step outlives many leases."""
    namespace = fresh_namespace()
    made = scenario(namespace, tmp_path / "worker.log", store={"step_lease_s": LEASE_S})
    yield made
    made.discard(delete_namespace)


def on_postgres(url: str, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    """A fault scenario whose run store is the PostgreSQL ``url`` names (the shipped leases and time limits)."""
    namespace = fresh_namespace()
    made = scenario(namespace, tmp_path / "worker.log", store={"url": url, "postgres_schema": schema_of(namespace)})
    yield made
    made.discard(delete_namespace)


@pytest.fixture
def on_own_postgres(
    services: None, delete_namespace: Callable[[str], None], tmp_path: Path, own_postgres: OwnPostgres
) -> Iterator[Fault]:
    """A fault scenario whose run store is the test's own cluster."""
    yield from on_postgres(own_postgres.url(), delete_namespace, tmp_path)


@pytest.fixture
def on_replicated_postgres(
    services: None,
    delete_namespace: Callable[[str], None],
    tmp_path: Path,
    own_replicated_postgres: OwnReplicatedPostgres,
) -> Iterator[Fault]:
    """A fault scenario whose run store is the test's own primary and standby, both named in store.url."""
    yield from on_postgres(own_replicated_postgres.url(), delete_namespace, tmp_path)
