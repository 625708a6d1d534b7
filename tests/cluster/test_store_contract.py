"""The run store's whole contract, every role, on the local Redis Cluster (``redis+cluster://``).

The contract's tests are the ones every backend passes (tests/pipelines/store); here their ``store``
is a store on the cluster, so each script must touch one slot and every command must be routed. It
waits for one replica (``store.wait_for_replicas``), as a store on a cluster with replicas may: its
durable writes then go to each shard's primary directly, each with its ``WAIT``, and must mean the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pipelines.store import NewRun, RedisRunStore
from tests.pipelines.store.conftest import chord_maker
from tests.pipelines.store.test_job_leases import *  # noqa: F403
from tests.pipelines.store.test_key_claims import *  # noqa: F403
from tests.pipelines.store.test_message_counts import *  # noqa: F403
from tests.pipelines.store.test_once_marks import *  # noqa: F403
from tests.pipelines.store.test_rate_slots import *  # noqa: F403
from tests.pipelines.store.test_run_deadlines import *  # noqa: F403
from tests.pipelines.store.test_run_feeds import *  # noqa: F403
from tests.pipelines.store.test_run_index import *  # noqa: F403
from tests.pipelines.store.test_run_plans import *  # noqa: F403
from tests.pipelines.store.test_run_steps import *  # noqa: F403
from tests.pipelines.store.test_run_views import *  # noqa: F403
from tests.pipelines.store.test_schedule_ticks import *  # noqa: F403
from tests.pipelines.store.test_stall_checks import *  # noqa: F403
from tests.pipelines.store.test_step_logs import *  # noqa: F403
from tests.pipelines.store.test_step_progress import *  # noqa: F403
from tests.pipelines.store.test_step_replays import *  # noqa: F403
from tests.pipelines.store.test_store_lifecycle import *  # noqa: F403
from tests.support.backends import STORE_KINDS, StoreKind
from tests.support.cluster.local_redis import LocalRedisCluster
from tests.support.housekeeping import fresh_namespace

pytestmark = pytest.mark.cluster

RETENTION_S = 3600
#: The replica wait: WAIT returns as soon as the replica acknowledges, so a generous limit costs nothing
#: and a replica slowed by a busy machine is not counted short.
REPLICA_WAIT_MS = 5000


def cluster_url(cluster: LocalRedisCluster) -> str:
    return f"redis+cluster://127.0.0.1:{cluster.servers[0].port},127.0.0.1:{cluster.servers[1].port}"


@pytest.fixture
def store_backend(redis_cluster: LocalRedisCluster) -> Iterator[str]:
    """The store kind's name, for the tests that make a store of their own from ``STORE_KINDS``."""
    STORE_KINDS["cluster"] = StoreKind(url=cluster_url(redis_cluster), partner=None, needs_services=False)
    yield "cluster"
    del STORE_KINDS["cluster"]


@pytest.fixture
def store_namespace() -> str:
    return fresh_namespace()


@pytest.fixture
def store(redis_cluster: LocalRedisCluster, store_namespace: str) -> Iterator[RedisRunStore]:
    url = cluster_url(redis_cluster)
    made = RedisRunStore(
        url=url,
        namespace=store_namespace,
        retention_s=RETENTION_S,
        wait_for_replicas=1,
        replica_wait_ms=REPLICA_WAIT_MS,
    )
    yield made
    assert made.replica_wait is not None
    assert made.replica_wait.short == 0, "a replica in sync did not acknowledge a write in time"
    made.delete_namespace()
    made.close()


@pytest.fixture
def script_store(store: RedisRunStore) -> RedisRunStore:
    """The cluster's store runs the Redis store's scripts: the tests of what only they do run on it too."""
    return store


@pytest.fixture
def new_chord(store_namespace: str) -> Callable[..., NewRun]:
    return chord_maker(store_namespace)
