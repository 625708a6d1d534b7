"""The store contract's backends and the runs its tests store.

Every test that takes ``store`` runs once per store kind of the suite's store axis,
``tests/support/backends.py``'s ``STORE_KINDS``: the embedded store (``memory://``, no service), the real
Redis and PostgreSQL. A new backend joins by adding its kind there (and its URL scheme to ``make_store``);
the tests of every role then run on it. The tests that take ``script_store`` are about what only the Redis
store's scripts do (its keys' expiry, its index's bounded reads): they run on the kinds that run them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from pipelines.config.sections import StoreConfig
from pipelines.store import NewRun, RedisRunStore, RunStore, make_store
from pipelines.wire.naming import run_id_for_key
from tests.support.backends import STORE_KINDS
from tests.support.housekeeping import delete_store, fresh_namespace

RETENTION_S = 3600

NewChord = Callable[..., NewRun]


@pytest.fixture(params=sorted(STORE_KINDS))
def store_backend(request: pytest.FixtureRequest) -> str:
    """The name of the store kind a contract test runs on (its test id)."""
    if STORE_KINDS[request.param].needs_services:
        request.getfixturevalue("services")
    return str(request.param)


@pytest.fixture(params=sorted(name for name, kind in STORE_KINDS.items() if kind.runs_scripts))
def script_backend(request: pytest.FixtureRequest) -> str:
    """The name of a store kind that runs the Redis store's scripts (its test id)."""
    if STORE_KINDS[request.param].needs_services:
        request.getfixturevalue("services")
    return str(request.param)


@pytest.fixture
def store_namespace() -> str:
    """The namespace of the test's store (a keyed run's id derives from it)."""
    return fresh_namespace()


def made_store(kind: str, namespace: str) -> Iterator[RunStore]:
    """A store of ``kind`` in ``namespace``, deleted afterwards."""
    config = StoreConfig(**STORE_KINDS[kind].settings(namespace), retention_s=RETENTION_S)
    made = make_store(config, namespace=namespace)
    yield made
    delete_store(made)
    made.close()


@pytest.fixture
def store(store_backend: str, store_namespace: str) -> Iterator[RunStore]:
    """A store of ``store_backend`` in a namespace of its own, deleted afterwards."""
    yield from made_store(store_backend, store_namespace)


@pytest.fixture
def script_store(script_backend: str, store_namespace: str) -> Iterator[RedisRunStore]:
    """A store of ``script_backend`` in a namespace of its own, deleted afterwards."""
    for made in made_store(script_backend, store_namespace):
        assert isinstance(made, RedisRunStore)
        yield made


@pytest.fixture
def new_chord(store_namespace: str) -> NewChord:
    """``new_chord(members, key=None, *, correlation_id, trace_id)``: see :func:`chord_maker`."""
    return chord_maker(store_namespace)


def chord_maker(namespace: str) -> NewChord:
    """Makes runs of chain(parallel(members), callback) in ``namespace``.

    Their steps: members ``0.0.<i>``, then the callback ``0.1``. A keyed run has its key's id.
    """

    def new(
        members: int, key: str | None = None, *, correlation_id: str | None = None, trace_id: str | None = None
    ) -> NewRun:
        steps = [(f"0.0.{i}", "member") for i in range(members)] + [("0.1", "callback")]
        return NewRun(
            run_id=run_id_for_key(namespace, key) if key else uuid.uuid4().hex,
            pipeline="chord",
            steps=steps,
            starts={"0.1": '[{"node": "0.1"}]'},
            entries={"0.1": ["0.1"]},
            idempotency_key=key,
            correlation_id=correlation_id,
            trace_id=trace_id,
        )

    return new
