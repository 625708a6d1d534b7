"""Fixtures of the scale-out tests: a three-node RabbitMQ cluster, a six-server Redis Cluster, and a Redis
primary with a replica watched by three sentinels.

Both are started on this machine once, by the first test of this package that asks for them, and
removed after its last test, so the rest of a full run has the machine's two cores back (a guardian
process removes them too if the session is killed; a later session removes what a killed one left).
Each test gets them whole: a node a previous test killed, stopped or cut off is restarted or
reconnected first. Start-up times are printed in the session's summary.

Needs root (network namespaces, the ``rabbitmq`` user), iproute2, util-linux's ``setpriv``, and the
Debian packages ``rabbitmq-server`` and ``redis-server``; nothing of the machine's shared RabbitMQ
node or Redis is used.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Protocol, TypeVar

import pytest

from tests.support.cluster.local_rabbit import SBIN, RabbitCluster
from tests.support.cluster.local_redis import LocalRedisCluster
from tests.support.cluster.local_sentinel import LocalSentinel
from tests.support.cluster.local_slot import Ownership, Slot, SlotBusyError

#: Start-up seconds by cluster and phase, printed at the end of the session.
STARTUP_TIMINGS: dict[str, dict[str, float]] = {}

NEEDED = {
    "ip": "iproute2",
    "setpriv": "util-linux",
    str(SBIN / "rabbitmq-server"): "rabbitmq-server",
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
}


@pytest.fixture(scope="package")
def cluster_slot() -> Iterator[Slot]:
    """This session's slot, locked, swept of any leftover, watched by a guardian; swept after the package."""
    if os.geteuid() != 0:
        pytest.fail(
            "the cluster tests need root (network namespaces, nodes run as the rabbitmq user): "
            "run them as root, or leave them out with -m 'not cluster'",
            pytrace=False,
        )
    missing = sorted({package for tool, package in NEEDED.items() if shutil.which(tool) is None})
    if missing:
        pytest.fail(f"the local clusters need the Debian packages {', '.join(missing)}", pytrace=False)
    try:
        ownership = Ownership(Slot.from_env())
    except (SlotBusyError, ValueError) as error:
        pytest.fail(str(error), pytrace=False)
    yield ownership.slot
    ownership.release()


class _Setup(Protocol):
    timings: dict[str, float]

    def start(self) -> None: ...

    def close(self) -> None: ...


_S = TypeVar("_S", bound=_Setup)


def _started(setup: _S, name: str) -> Iterator[_S]:
    """``setup`` started (its start-up times kept for the summary), and removed after."""
    try:
        setup.start()
        STARTUP_TIMINGS[name] = setup.timings
        yield setup
    finally:
        setup.close()


@pytest.fixture(scope="package")
def rabbit_cluster_session(cluster_slot: Slot) -> Iterator[RabbitCluster]:
    yield from _started(RabbitCluster(cluster_slot), "RabbitMQ cluster (3 nodes)")


@pytest.fixture
def rabbit_cluster(rabbit_cluster_session: RabbitCluster) -> RabbitCluster:
    """The session's RabbitMQ cluster with all three nodes running and connected."""
    rabbit_cluster_session.ensure_healthy()
    return rabbit_cluster_session


@pytest.fixture(scope="package")
def redis_cluster_session(cluster_slot: Slot) -> Iterator[LocalRedisCluster]:
    yield from _started(LocalRedisCluster(cluster_slot), "Redis Cluster (3 primaries + 3 replicas)")


@pytest.fixture
def redis_cluster(redis_cluster_session: LocalRedisCluster) -> LocalRedisCluster:
    """The session's Redis Cluster with every server running, three primaries each with a replica."""
    redis_cluster_session.ensure_healthy()
    return redis_cluster_session


@pytest.fixture(scope="package")
def redis_sentinel_session(cluster_slot: Slot) -> Iterator[LocalSentinel]:
    yield from _started(LocalSentinel(cluster_slot), "Redis primary + replica + 3 sentinels")


@pytest.fixture
def redis_sentinel(redis_sentinel_session: LocalSentinel) -> LocalSentinel:
    """The session's primary with its replica in sync, watched by three sentinels that agree."""
    redis_sentinel_session.ensure_whole()
    return redis_sentinel_session


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, timings in STARTUP_TIMINGS.items():
        phases = ", ".join(f"{phase.removesuffix('_s')} {seconds:.1f} s" for phase, seconds in timings.items())
        terminalreporter.write_line(f"local {name} started: {phases}")
