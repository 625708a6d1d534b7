"""The backends the suite runs on: two axes, broker kinds and store kinds, each a table a new kind joins.

A new broker or store joins by one entry in :data:`BROKER_KINDS` or :data:`STORE_KINDS` (its settings,
the partner it is paired with, whether it needs the test services), and then:

- the store contract tests (``tests/pipelines/store``) run on every store kind;
- the broker tests marked :data:`on_each_broker` run on every broker kind, with its partner store;
- every behaviour test (one that takes ``make_app``, hence ``backend``) runs on each pair in
  :data:`PAIRED`: each kind of either axis with the partner it names. Today that is the embedded
  broker with the embedded store and RabbitMQ with Redis (PostgreSQL names no partner yet);
- the behaviour tests marked :data:`on_every_backend` (the runtime of composed pipelines,
  ``tests/pipelines/test_runs.py``) run on every pair of the product, :data:`EVERY_BACKEND`.

A test that is about one broker pins it with :func:`only_on` (that broker with its partner store).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any

import pytest

from pipelines.store import EMBEDDED_URL

AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: The PostgreSQL store's database, where the fail-closed tests also count effects (a table of their own each,
#: dropped afterwards); each test namespace's store has a schema of its own there, dropped afterwards.
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
POSTGRES_URL = os.environ.get("PIPELINES_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
#: Half the default delay tiers: each namespace declares fewer quorum queues (longer waits hop through
#: the 30 s tier), which keeps the suite's churn on RabbitMQ's Raft log down.
TEST_DELAY_TIERS_S = [0.1, 0.5, 1.0, 5.0, 30.0]


@dataclass(frozen=True)
class BrokerKind:
    """A broker the behaviour tests run on."""

    settings: Mapping[str, Any]
    """The ``[broker]`` section that selects it (a test's own overrides are merged in)."""
    partner: str
    """The store kind it runs every behaviour test with (the other stores: only the tests on every backend)."""
    needs_services: bool
    """It talks to the test services (RabbitMQ, Redis): a test on it fails when they do not answer."""


@dataclass(frozen=True)
class StoreKind:
    """A run store the contract tests and the behaviour tests run on."""

    url: str
    """The ``store.url`` that selects it."""
    partner: str | None
    """The broker kind it runs every behaviour test with; None: only the contract and the tests on every backend."""
    needs_services: bool
    """It talks to the test services (Redis, PostgreSQL): a test on it fails when they do not answer."""
    runs_scripts: bool = True
    """It runs the Redis store's Lua scripts (the tests of what only they do run on it too)."""
    schema_per_namespace: bool = False
    """Its tables go in a schema of each test namespace's own (:func:`schema_of`), dropped with it."""

    def settings(self, namespace: str) -> dict[str, Any]:
        """The ``[store]`` section that selects it for a test namespace."""
        if self.schema_per_namespace:
            return {"url": self.url, "postgres_schema": schema_of(namespace)}
        return {"url": self.url}


def schema_of(namespace: str) -> str:
    """The PostgreSQL schema of a test namespace (``t-...`` becomes ``t_...``: a plain identifier)."""
    return namespace.replace("-", "_")


#: Broker kinds by name (the first half of a test id).
BROKER_KINDS: dict[str, BrokerKind] = {
    "memory": BrokerKind(settings={"url": "memory://"}, partner="memory", needs_services=False),
    "rabbitmq": BrokerKind(
        settings={"url": AMQP_URL, "delay_tiers_s": TEST_DELAY_TIERS_S}, partner="redis", needs_services=True
    ),
}
#: Store kinds by name (the second half of a test id, the whole id of a contract test).
STORE_KINDS: dict[str, StoreKind] = {
    "memory": StoreKind(url=EMBEDDED_URL, partner="memory", needs_services=False),
    "redis": StoreKind(url=REDIS_URL, partner="rabbitmq", needs_services=True),
    "postgres": StoreKind(
        url=POSTGRES_URL, partner=None, needs_services=True, runs_scripts=False, schema_per_namespace=True
    ),
}
#: A Redis Cluster to run the store on too (tests/cluster runs the contract on a cluster of its own).
if os.environ.get("PIPELINES_TEST_REDIS_CLUSTER_URL"):
    STORE_KINDS["cluster"] = StoreKind(
        url=os.environ["PIPELINES_TEST_REDIS_CLUSTER_URL"], partner=None, needs_services=False
    )


@dataclass(frozen=True, order=True)
class Backend:
    """One pair of the two axes: the broker a test's apps use, and their run store."""

    broker: str
    store: str

    def __str__(self) -> str:
        """The test id: ``memory-memory``, ``rabbitmq-redis``, ..."""
        return f"{self.broker}-{self.store}"

    @property
    def needs_services(self) -> bool:
        return BROKER_KINDS[self.broker].needs_services or STORE_KINDS[self.store].needs_services

    def sections(self, namespace: str) -> dict[str, dict[str, Any]]:
        """The ``[broker]`` and ``[store]`` settings that select this pair for a test namespace."""
        return {
            "broker": dict(BROKER_KINDS[self.broker].settings),
            "store": STORE_KINDS[self.store].settings(namespace),
        }


def paired(broker: str) -> Backend:
    """``broker`` with its partner store."""
    return Backend(broker, BROKER_KINDS[broker].partner)


#: Each kind of either axis with the partner it names: the pairs every behaviour test runs on.
PAIRED: tuple[Backend, ...] = tuple(
    sorted(
        {paired(broker) for broker in BROKER_KINDS}
        | {Backend(kind.partner, store) for store, kind in STORE_KINDS.items() if kind.partner is not None}
    )
)
#: Every broker kind with every store kind.
EVERY_BACKEND: tuple[Backend, ...] = tuple(Backend(b, s) for b, s in product(BROKER_KINDS, STORE_KINDS))


def on(*backends: Backend) -> pytest.MarkDecorator:
    """Runs a test that takes ``backend`` on these pairs (instead of :data:`PAIRED`)."""
    return pytest.mark.parametrize("backend", backends, indirect=True, ids=str)


def only_on(broker: str) -> pytest.MarkDecorator:
    """Runs a test about one broker on it alone, with its partner store."""
    return on(paired(broker))


#: The tests of what every broker implements: once per broker kind, each with its partner store.
on_each_broker = on(*(paired(broker) for broker in BROKER_KINDS))
#: The core behaviour tests that run on the whole product of the two axes.
on_every_backend = on(*EVERY_BACKEND)
