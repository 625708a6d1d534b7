"""Fixtures of the fail-closed suite: apps on the real RabbitMQ and Redis, a ledger of what became of each
delivery, raw publishing, and a PostgreSQL table that counts effects (helpers in ``fail_closed_support``).

Every test here runs against the real services (``backend`` is RabbitMQ with Redis), unless it asks for
the embedded broker too (``@pytest.mark.parametrize("backend", ["memory", "rabbitmq"], indirect=True)``:
each broker kind with its partner store) or names its pairs (``@on(Backend("rabbitmq", "postgres"), ...)``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator

import pytest

from pipelines.app import App
from tests.support.backends import Backend, paired
from tests.support.fail_closed.fail_closed_support import ConsumerRestarts, Effects, Ledger, RawPublisher


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """This suite is about the real consumer and the real store: RabbitMQ and Redis, unless the test is
    parametrized with the embedded broker too (a broker kind: with its partner store), or with pairs
    (:func:`~tests.support.backends.on`)."""
    param = getattr(request, "param", "rabbitmq")
    chosen = param if isinstance(param, Backend) else paired(str(param))
    if chosen.needs_services:
        request.getfixturevalue("services")
    return chosen


@pytest.fixture
def ledger() -> Callable[[App], Ledger]:
    """Attaches a :class:`Ledger` to an app's broker (before its worker starts)."""

    def attach(app: App) -> Ledger:
        found = Ledger()
        app.broker.add_middleware(found)
        return found

    return attach


@pytest.fixture
def consumer_restarts() -> Iterator[ConsumerRestarts]:
    """Counts consumer restarts Dramatiq logs while the test runs."""
    handler = ConsumerRestarts()
    target = logging.getLogger("dramatiq.worker")
    target.addHandler(handler)
    yield handler
    target.removeHandler(handler)


@pytest.fixture
def raw_publisher(services: None) -> Iterator[RawPublisher]:
    publisher = RawPublisher()
    yield publisher
    publisher.close()


@pytest.fixture
def effects() -> Iterator[Effects]:
    """A fresh effects table in the shared PostgreSQL (``fc_<random>``), dropped afterwards."""
    table = Effects(f"fc_{uuid.uuid4().hex[:12]}")
    yield table
    table.drop()
