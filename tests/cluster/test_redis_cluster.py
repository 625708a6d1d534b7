"""The local Redis Cluster is a real one: three primaries sharing the slots, each with a replica in sync,
and a key written (and acknowledged by a replica) survives its primary's SIGKILL once the replica is promoted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from local_redis import LocalRedisCluster
from redis.cluster import RedisCluster

pytestmark = pytest.mark.cluster

SLOTS = 16384


@pytest.fixture
def cluster_client(redis_cluster: LocalRedisCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    yield client
    client.close()


def test_three_primaries_share_every_slot_each_with_a_replica_in_sync(redis_cluster: LocalRedisCluster) -> None:
    layout = redis_cluster.primaries()
    assert len(layout) == 3
    assert all(len(replicas) == 1 and redis_cluster.replica_in_sync(replicas[0]) for replicas in layout.values())
    covered = 0
    for node in redis_cluster.view(next(iter(layout))):
        for span in node.slots:
            first, _, last = span.partition("-")
            covered += int(last or first) - int(first) + 1
    assert covered == SLOTS


def test_a_key_acknowledged_by_a_replica_survives_its_primarys_sigkill(
    redis_cluster: LocalRedisCluster, cluster_client: RedisCluster
) -> None:
    key = f"cluster-smoke:{uuid.uuid4().hex}"
    cluster_client.set(key, "kept", ex=300)
    primary = redis_cluster.primary_of(key)
    # Replication is asynchronous: only a write a replica has acknowledged is sure to outlive its primary.
    assert redis_cluster.client(primary).wait(1, 5000) == 1
    replicas = redis_cluster.primaries()[primary]

    redis_cluster.kill(primary)
    killed_at = time.monotonic()
    promoted = redis_cluster.wait_promoted(primary, replicas)
    print(f"port {promoted} promoted {time.monotonic() - killed_at:.1f} s after port {primary}'s SIGKILL")

    assert cluster_client.get(key) == "kept"  # the client follows the slot to its new primary
    assert redis_cluster.primary_of(key, via=promoted) == promoted
    cluster_client.delete(key)
