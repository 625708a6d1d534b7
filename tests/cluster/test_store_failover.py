"""Runs on a Redis Cluster store whose busiest primary is SIGKILLed mid-run and replaced by its replica.

The broker failover tests' load (keyed messages, three-step chains and chords of 20, published by a
producer thread while a stock ``dramatiq`` worker runs them) goes through the single RabbitMQ node, and
the run store is a local Redis Cluster of three primaries with a replica each. Every execution is
recorded in PostgreSQL, and each effect, keyed by ``current_effect_key()``, in a table with no unique
constraint, so an effect applied twice shows as two rows. What the store had acknowledged but not yet
replicated is lost with the primary (replication is asynchronous): a step may run again, with the same
effect key, and nothing may be lost or left running. Figures are printed (``-s``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from failover_load import Load, Producer, execution_times, longest_pause, start_worker, stop_worker, wait_for_runs
from local_redis import LocalRedisCluster
from local_slot import wait_for

from pipelines.app import build_app
from pipelines.config import Settings
from pipelines.naming import run_key
from pipelines.store import RedisRunStore
from tests.backends import AMQP_URL, POSTGRES_URL, TEST_DELAY_TIERS_S
from tests.housekeeping import fresh_namespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fail_closed" / "helpers"))
from fail_closed_support import Effects

pytestmark = pytest.mark.cluster

#: The broker failover tests' load: 2,000 keyed messages, 300 three-step chains, 50 chords of 20.
LOAD = Load(keyed=2000, chains=300, chords=50, width=20)
#: Over how long the producer publishes it: the kill lands while work is still arriving.
SPAN_S = 40.0
#: A step whose completion was lost with the primary runs again once its lease lapses.
LEASE_S = 5.0
#: Longest the runs may take to finish once everything is published.
SETTLE_S = 90.0


@pytest.fixture
def effects() -> Iterator[tuple[Effects, Effects]]:
    """The keyed effects (``<table>``, no unique constraint) and every execution (``<table>_runs``)."""
    table = Effects(f"cl_{uuid.uuid4().hex[:12]}")
    runs = Effects(f"{table.table}_runs")
    yield table, runs
    runs.drop()
    table.drop()


@pytest.mark.timeout(300)
def test_work_goes_on_when_a_store_primary_is_sigkilled_and_each_keyed_effect_applies_once(
    redis_cluster: LocalRedisCluster,
    delete_namespace: Callable[[str], None],
    effects: tuple[Effects, Effects],
    tmp_path: Path,
) -> None:
    keyed_effects, executions = effects
    namespace = fresh_namespace()
    store_url = f"redis+cluster://127.0.0.1:{redis_cluster.servers[0].port},127.0.0.1:{redis_cluster.servers[1].port}"
    settings = Settings.from_values(
        {
            "namespace": namespace,
            "broker": {"url": AMQP_URL, "delay_tiers_s": TEST_DELAY_TIERS_S},
            "store": {"url": store_url, "step_lease_s": LEASE_S},
        }
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_BROKER__DELAY_TIERS_S": str(TEST_DELAY_TIERS_S).replace(" ", ""),
        "PIPELINES_STORE__URL": store_url,
        "PIPELINES_STORE__STEP_LEASE_S": str(LEASE_S),
        "PIPELINES_LOGGING__LEVEL": "WARNING",
        "CL_EFFECTS_TABLE": keyed_effects.table,
        "CL_POSTGRES_URL": POSTGRES_URL,
    }
    app = build_app(settings)
    log = tmp_path / "worker.log"
    producer = Producer(app, LOAD, SPAN_S)
    worker = None
    try:
        app.broker.ensure_topology()  # type: ignore[union-attr]
        worker = start_worker(env, log)
        producer.start()

        def executed() -> int:
            return sum(executions.counts().values())

        wait_for(lambda: executed() >= LOAD.executions // 4, "a quarter of the work", 90, interval_s=0.2)
        by_primary = Counter(redis_cluster.primary_of(run_key(namespace, run.id)) for run in list(producer.runs))
        busiest, runs_on_it = by_primary.most_common(1)[0]
        replicas = redis_cluster.primaries()[busiest]
        done_before = executed()
        killed_at = time.time()
        redis_cluster.kill(busiest)
        promoted = redis_cluster.wait_promoted(busiest, replicas)
        promoted_at = time.time()
        redis_cluster.restart(busiest)  # it rejoins as a replica of the promoted one

        producer.wait(SETTLE_S + SPAN_S)
        states = wait_for_runs(producer.runs, SETTLE_S)
        runs = {run.id for run in producer.runs}

        def every_keyed_message_applied() -> bool:
            # A keyed message put off while its key's shard was down comes back after its delay.
            return sum(key.split(":", 1)[0] not in runs for key in keyed_effects.counts()) >= LOAD.keyed

        with contextlib.suppress(TimeoutError):  # the assertions below say what is missing
            wait_for(every_keyed_message_applied, "every keyed message's effect", SETTLE_S, interval_s=0.5)
        finished_at = time.time()
        keyed = keyed_effects.counts()
        ran = executions.counts()
        of_runs = [key for key in keyed if key.split(":", 1)[0] in runs]
        messages = [key for key in keyed if key.split(":", 1)[0] not in runs]
        times = execution_times(POSTGRES_URL, keyed_effects.table)
        figures = (
            f"store primary {busiest} (holding {runs_on_it} of the {by_primary.total()} runs "
            f"started by then, {done_before} of {LOAD.executions} executions done) SIGKILLed, replica {promoted} "
            f"promoted after {promoted_at - killed_at:.1f} s, work stood still at most "
            f"{longest_pause(times, killed_at, min(finished_at, producer.finished_at)):.1f} s; runs {dict(states)} "
            f"of {len(runs)} started ({LOAD.chains} chains of 3, {LOAD.chords} chords of {LOAD.width}), keyed "
            f"messages with an effect {len(messages)}/{LOAD.keyed}, effects applied twice "
            f"{sum(c > 1 for c in keyed.values())}, executions {sum(ran.values())} (again after the kill: "
            f"{sum(c - 1 for c in ran.values())}), publishes the producer had to repeat {len(producer.errors)}, "
            f"dead letters {len(app.dead_letters.list())}"
            + "".join(f"\n  repeated after: {error}" for error in producer.errors[:3])
        )
        print(f"\nfigures: {figures}")
        tail = log.read_text(errors="replace")[-3000:]
        assert states == {"succeeded": len(runs)}, f"{figures}\nworker log tail:\n{tail}"
        assert len(messages) == LOAD.keyed, figures
        assert len(of_runs) == LOAD.chains * 3 + LOAD.chords * (LOAD.width + 1), figures
        assert set(keyed.values()) == {1}, figures
    finally:
        producer.done.wait(SPAN_S + SETTLE_S)
        if worker is not None:
            stop_worker(worker)
        assert isinstance(app.store, RedisRunStore)
        app.store.delete_namespace()  # the cluster's keys
        app.close()
        delete_namespace(namespace)  # the queues and exchanges
