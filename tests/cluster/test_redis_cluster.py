"""The local Redis Cluster is a real one: three primaries sharing the slots, each with a replica in sync,
and a key written (and acknowledged by a replica) survives its primary's SIGKILL once the replica is promoted.
A run store that waits for replicas waits on each shard for that shard's replica, and follows a failover.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from pipelines.store import NewRun, RedisRunStore
from pipelines.wire.naming import run_key
from tests.support.cluster.local_redis import LocalRedisCluster
from tests.support.housekeeping import fresh_namespace

pytestmark = pytest.mark.cluster

SLOTS = 16384
#: How long the waiting store waits for a replica: what a silenced one costs each write, and long enough
#: that a replica in sync on a busy two-core machine is never counted short.
WAIT_MS = 1000


@pytest.fixture
def cluster_client(redis_cluster: LocalRedisCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    yield client
    client.close()


def _waits(cluster: LocalRedisCluster, port: int) -> int:
    """How many WAITs the server on ``port`` has served."""
    return int(cluster.client(port).info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


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


@pytest.fixture
def namespace() -> str:
    return fresh_namespace()


@pytest.fixture
def waiting_store(redis_cluster: LocalRedisCluster, namespace: str) -> Iterator[RedisRunStore]:
    """A run store on the cluster that waits up to ``WAIT_MS`` for one replica; its namespace deleted after."""
    url = f"redis+cluster://127.0.0.1:{redis_cluster.servers[0].port}"
    store = RedisRunStore(url=url, namespace=namespace, retention_s=3600, wait_for_replicas=1, replica_wait_ms=WAIT_MS)
    yield store
    redis_cluster.ensure_healthy()
    store.delete_namespace()
    store.close()


def _runs(count: int) -> list[NewRun]:
    """``count`` runs of one step."""
    return [
        NewRun(run_id=uuid.uuid4().hex, pipeline="one", steps=[("0", "a")], starts={}, entries={}) for _ in range(count)
    ]


def test_each_shard_waits_for_its_own_replica_and_a_silent_one_is_counted_for_its_runs_only(
    redis_cluster: LocalRedisCluster, waiting_store: RedisRunStore, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    layout = redis_cluster.primaries()
    waits_before = {port: _waits(redis_cluster, port) for port in layout}
    runs = _runs(30)
    waiting_store.create_runs(runs)
    assert waiting_store.replica_wait is not None
    assert waiting_store.replica_wait.short == 0
    assert all(_waits(redis_cluster, port) > waits_before[port] for port in layout)  # each primary waited

    silent_primary = next(iter(layout))
    replica = redis_cluster.server(layout[silent_primary][0])
    assert replica.process is not None
    caplog.set_level(logging.WARNING, logger="pipelines.store")
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        more = _runs(30)
        waiting_store.create_runs(more)
        for run in more:
            waiting_store.claim_step(run.run_id, "0", attempt=1, lease_ms=60_000)
            waiting_store.complete_step(run.run_id, "0", (), "1")
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)

    on_silent = sum(redis_cluster.primary_of(run_key(namespace, run.run_id)) == silent_primary for run in more)
    assert 0 < on_silent < len(more)
    assert waiting_store.replica_wait.short == 2 * on_silent  # its creations and completions, no other shard's
    assert all(waiting_store.run_state(run.run_id) == "succeeded" for run in more)
    assert any("acknowledged by 0 of the 1 replica(s)" in record.getMessage() for record in caplog.records)


def test_a_waiting_store_follows_a_failover_and_counts_what_it_could_not_wait_for(
    redis_cluster: LocalRedisCluster, waiting_store: RedisRunStore, namespace: str
) -> None:
    runs = _runs(12)
    waiting_store.create_runs(runs)
    layout = redis_cluster.primaries()
    victim = redis_cluster.primary_of(run_key(namespace, runs[0].run_id))
    on_victim = sum(redis_cluster.primary_of(run_key(namespace, run.run_id)) == victim for run in runs)

    redis_cluster.kill(victim)
    redis_cluster.wait_promoted(victim, layout[victim])
    for run in runs:  # the store still routes the victim's slots to it: those go again through the cluster
        waiting_store.claim_step(run.run_id, "0", attempt=1, lease_ms=60_000)
        waiting_store.complete_step(run.run_id, "0", (), "1")

    assert all(waiting_store.run_state(run.run_id) == "succeeded" for run in runs)
    assert waiting_store.replica_wait is not None
    # The promoted replica has no replica of its own (its primary is down): none of its runs' completions
    # could be waited for; every other shard's were.
    assert waiting_store.replica_wait.short == on_victim
