"""Runs on a replicated store whose primary is SIGKILLed mid-run and replaced by its replica: the busiest
primary of a Redis Cluster, or the primary three Redis Sentinels watch (under a store that waits for its
replica, ``store.wait_for_replicas = 1``).

The broker failover tests' load (keyed messages, three-step chains and chords of 20, published by a
producer thread while a stock ``dramatiq`` worker runs them) goes through the single RabbitMQ node, and
the run store is a local Redis Cluster of three primaries with a replica each, or a primary with one
replica and three sentinels. Every execution is recorded in PostgreSQL, and each effect, keyed by
``current_effect_key()``, in a table with no unique constraint, so an effect applied twice shows as two
rows. What the store had acknowledged but not yet replicated is lost with the primary (replication is
asynchronous): a step whose completion was lost is re-driven by the stall sweep and runs again, with the
same effect key, and nothing may be left running. A run whose creation was lost so is gone (its messages
are dead-lettered with the reason); where the store waits for its replica, it must have reported that
write short. Figures are printed (``-s``).

The two failovers are of different servers, each test's work in a namespace, a worker and tables of its
own: the sentinels' runs in a thread of its own from the module's first test on
(``tests/support/overlap.py``), beside the Redis Cluster's.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipelines.app import build_app
from pipelines.config.settings import Settings
from pipelines.runs import Run
from pipelines.store import RedisRunStore
from pipelines.wire.naming import run_key
from tests.support.backends import AMQP_URL, POSTGRES_URL, TEST_DELAY_TIERS_S
from tests.support.cluster.failover_load import (
    NOT_IN_STORE,
    Load,
    Producer,
    discard_worker,
    execution_times,
    longest_pause,
    runs_not_in_store,
    start_worker,
    wait_for_runs,
)
from tests.support.cluster.local_redis import LocalRedisCluster
from tests.support.cluster.local_sentinel import LocalSentinel
from tests.support.cluster.local_slot import wait_for
from tests.support.fail_closed.fail_closed_support import Effects
from tests.support.housekeeping import fresh_namespace
from tests.support.overlap import in_background, start_with_the_first_test

pytestmark = pytest.mark.cluster

#: The broker failover tests' load: 2,000 keyed messages, 300 three-step chains, 50 chords of 20.
LOAD = Load(keyed=2000, chains=300, chords=50, width=20)
#: Over how long the producer publishes it: the kill lands while work is still arriving. It comes once a
#: quarter of the work is done (about 6 s in) and the replica is promoted about 5 s later (a 3 s node
#: timeout, then the election): the fault is over before the span's half.
SPAN_S = 25.0
#: Half of it, on the primary the sentinels watch (one primary takes every run).
SENTINEL_LOAD = Load(keyed=1000, chains=150, chords=25, width=20)
SENTINEL_SPAN_S = 20.0
#: The steps' lease: short, so that a lease the failover left behind lapses soon.
LEASE_S = 5.0
#: A step whose completion was lost with the primary (its delivery acknowledged) leaves its run untouched
#: and without a live lease: the stall sweep re-drives it this long after its last touch (sweeping each
#: quarter of it), well inside SETTLE_S.
STALLED_AFTER_S = 15.0
#: Longest the runs may take to finish once everything is published.
SETTLE_S = 90.0
#: Longest a replica lags behind its primary on this loopback (a write older than this at the kill was
#: replicated), where the store does not wait for it.
LAG_S = 2.0
#: Longest a start whose creation the killed primary took may return after the kill (its ``WAIT`` cut
#: short by the lost connection).
AFTER_KILL_S = 1.0


@pytest.fixture
def effects() -> Iterator[tuple[Effects, Effects]]:
    """The keyed effects (``<table>``, no unique constraint) and every execution (``<table>_runs``)."""
    table = Effects(f"cl_{uuid.uuid4().hex[:12]}")
    runs = Effects(f"{table.table}_runs")
    yield table, runs
    runs.drop()
    table.drop()


@dataclass
class Failover:
    """What a test's fault did: who was lost, who took over, when, and what it held then."""

    lost: str
    promoted: str
    killed_at: float
    promoted_at: float
    held: str


def run_through_a_failover(
    store_url: str,
    *,
    store_options: dict[str, Any],
    load: Load,
    span_s: float,
    fault: Callable[[str, list[Run[Any]]], Failover],
    delete_namespace: Callable[[str], None],
    effects: tuple[Effects, Effects],
    log: Path,
) -> str:
    """Publish ``load`` over ``span_s`` while a ``dramatiq`` worker runs it on a store at ``store_url``,
    call ``fault(namespace, runs started so far)`` once a quarter of the work is done, then check that
    every run succeeded and every keyed effect applied once; the figures."""
    keyed_effects, executions = effects
    namespace = fresh_namespace()
    store = {"url": store_url, "step_lease_s": LEASE_S, "stalled_run_after_s": STALLED_AFTER_S, **store_options}
    settings = Settings.from_values(
        {"namespace": namespace, "broker": {"url": AMQP_URL, "delay_tiers_s": TEST_DELAY_TIERS_S}, "store": store}
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_BROKER__DELAY_TIERS_S": str(TEST_DELAY_TIERS_S).replace(" ", ""),
        **{f"PIPELINES_STORE__{key.upper()}": str(value) for key, value in store.items()},
        "PIPELINES_LOGGING__LEVEL": "WARNING",
        "CL_EFFECTS_TABLE": keyed_effects.table,
        "CL_POSTGRES_URL": POSTGRES_URL,
    }
    app = build_app(settings)
    producer = Producer(app, load, span_s)
    worker = None
    try:
        app.broker.ensure_topology()  # type: ignore[union-attr]
        worker = start_worker(env, log)
        producer.start()

        def executed() -> int:
            return sum(executions.counts().values())

        wait_for(lambda: executed() >= load.executions // 4, "a quarter of the work", 90, interval_s=0.2)
        done_before = executed()
        failover = fault(namespace, list(producer.runs))

        producer.wait(SETTLE_S + span_s)
        states = wait_for_runs(producer.runs, SETTLE_S)
        runs = {run.id for run in producer.runs}
        lost = runs_not_in_store(producer.runs)
        kept = runs - lost

        def every_keyed_message_applied() -> bool:
            # A keyed message put off while its key's shard was down comes back after its delay.
            return sum(key.split(":", 1)[0] not in runs for key in keyed_effects.counts()) >= load.keyed

        with contextlib.suppress(TimeoutError):  # the assertions below say what is missing
            wait_for(every_keyed_message_applied, "every keyed message's effect", SETTLE_S, interval_s=0.5)
        finished_at = time.time()
        keyed = keyed_effects.counts()
        ran = executions.counts()
        of_kept_runs = [key for key in keyed if key.split(":", 1)[0] in kept]
        messages = [key for key in keyed if key.split(":", 1)[0] not in runs]
        times = execution_times(POSTGRES_URL, keyed_effects.table)
        stood_still = longest_pause(times, failover.killed_at, min(finished_at, producer.finished_at))
        dead_letters = app.dead_letters.list(limit=1000)
        assert isinstance(app.store, RedisRunStore)
        short = app.store.replica_wait.short if app.store.replica_wait is not None else None
        figures = (
            f"store primary {failover.lost} ({failover.held}, {done_before} of {load.executions} executions done) "
            f"SIGKILLed, {failover.promoted} promoted after {failover.promoted_at - failover.killed_at:.1f} s, work "
            f"stood still at most {stood_still:.1f} s; runs {dict(states)} of {len(runs)} started ({load.chains} "
            f"chains of 3, {load.chords} chords of {load.width}), keyed messages with an effect "
            f"{len(messages)}/{load.keyed}, effects applied twice {sum(c > 1 for c in keyed.values())}, "
            f"executions {sum(ran.values())} (again after the kill: {sum(c - 1 for c in ran.values())}), "
            f"publishes the producer had to repeat {len(producer.errors)}, dead letters {len(dead_letters)}"
            + ("" if short is None else f", the producer's writes its replica had not acknowledged in time {short}")
            + "".join(
                f"\n  lost run {run_id}, started {failover.killed_at - producer.started_at[run_id]:.3f} s "
                "before the kill"
                for run_id in sorted(lost)
            )
            + "".join(f"\n  repeated after: {error}" for error in producer.errors[:3])
        )
        tail = log.read_text(errors="replace")[-3000:]
        assert states == Counter({"succeeded": len(kept), NOT_IN_STORE: len(lost)}), (
            f"{figures}\nworker log tail:\n{tail}"
        )
        # A run the store lost is one whose creation a primary took and had not replicated when it was lost.
        # Where the store waits for its replica, it reported each such write short (a write to a primary
        # without its replica, after the failover too, is one). Otherwise only the killed primary had it:
        # acknowledged just before the kill (or cut short by it: its start may return just after).
        if short is not None:
            assert len(lost) <= short, figures
        else:
            before_kill = [failover.killed_at - producer.started_at[run_id] for run_id in lost]
            assert all(-AFTER_KILL_S < ahead < LAG_S for ahead in before_kill), figures
        # What arrives for a lost run is dead-lettered with its reason; nothing else is.
        assert all(
            letter.reason.reason == "run or step not in the run store" and letter.reason.run_id in lost
            for letter in dead_letters
        ), figures
        assert len(messages) == load.keyed, figures
        assert len(of_kept_runs) == sum(producer.executions_of[run_id] for run_id in kept), figures
        assert set(keyed.values()) == {1}, figures
        return figures
    finally:
        producer.done.wait(span_s + SETTLE_S)
        if worker is not None:
            discard_worker(worker)
        assert isinstance(app.store, RedisRunStore)
        app.store.delete_namespace()  # the store's keys
        app.close()
        delete_namespace(namespace)  # the queues and exchanges


@pytest.mark.timeout(300)
def test_work_goes_on_when_a_store_primary_is_sigkilled_and_each_keyed_effect_applies_once(
    redis_cluster: LocalRedisCluster,
    delete_namespace: Callable[[str], None],
    effects: tuple[Effects, Effects],
    tmp_path: Path,
) -> None:
    def kill_the_busiest_primary(namespace: str, runs: list[Run[Any]]) -> Failover:
        by_primary = Counter(redis_cluster.primary_of(run_key(namespace, run.id)) for run in runs)
        busiest, runs_on_it = by_primary.most_common(1)[0]
        replicas = redis_cluster.primaries()[busiest]
        killed_at = time.time()
        redis_cluster.kill(busiest)
        promoted = redis_cluster.wait_promoted(busiest, replicas)
        promoted_at = time.time()
        redis_cluster.restart(busiest)  # it rejoins as a replica of the promoted one
        held = f"holding {runs_on_it} of the {by_primary.total()} runs started by then"
        return Failover(str(busiest), f"replica {promoted}", killed_at, promoted_at, held)

    store_url = f"redis+cluster://127.0.0.1:{redis_cluster.servers[0].port},127.0.0.1:{redis_cluster.servers[1].port}"
    figures = run_through_a_failover(
        store_url,
        store_options={},
        load=LOAD,
        span_s=SPAN_S,
        fault=kill_the_busiest_primary,
        delete_namespace=delete_namespace,
        effects=effects,
        log=tmp_path / "worker.log",
    )
    print(f"\nfigures: {figures}")


def through_the_sentinels_failover(
    redis_sentinel: LocalSentinel, delete_namespace: Callable[[str], None], log: Path
) -> str:
    """The load on the primary the sentinels watch, under a store that waits for its replica, while
    the primary is SIGKILLed; the figures (what is asserted is asserted in :func:`run_through_a_failover`)."""

    def kill_the_primary(namespace: str, runs: list[Run[Any]]) -> Failover:
        primary = redis_sentinel.primary_port()
        killed_at = time.time()
        redis_sentinel.kill(primary)
        promoted = redis_sentinel.wait_promoted(primary)
        promoted_at = time.time()
        # Back as a replica of the promoted one, as a supervisor would restart it: until then every write
        # waits the whole ``replica_wait_ms`` for a replica there is not (``test_store_sentinel.py``).
        redis_sentinel.ensure_whole()
        return Failover(str(primary), f"replica {promoted}", killed_at, promoted_at, f"all {len(runs)} runs")

    table = Effects(f"cl_{uuid.uuid4().hex[:12]}")
    executions = Effects(f"{table.table}_runs")
    try:
        redis_sentinel.ensure_whole()  # what the ``redis_sentinel`` fixture does
        return run_through_a_failover(
            redis_sentinel.url,
            store_options={"wait_for_replicas": 1},
            load=SENTINEL_LOAD,
            span_s=SENTINEL_SPAN_S,
            fault=kill_the_primary,
            delete_namespace=delete_namespace,
            effects=(table, executions),
            log=log,
        )
    finally:
        redis_sentinel.ensure_whole()
        executions.drop()
        table.drop()


@pytest.fixture(scope="module")
def sentinels_failover(
    redis_sentinel_session: LocalSentinel,
    delete_namespace: Callable[[str], None],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Future[str]]:
    """The sentinels' failover, started in a thread of its own; its figures, once it is over."""
    log = tmp_path_factory.mktemp("sentinels_failover") / "worker.log"
    with in_background(through_the_sentinels_failover, redis_sentinel_session, delete_namespace, log) as outcome:
        yield outcome


@pytest.fixture(scope="module", autouse=True)
def _sentinels_failover_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "sentinels_failover")


@pytest.mark.timeout(300)
def test_work_goes_on_when_the_sentinels_primary_is_sigkilled_under_a_store_waiting_for_its_replica(
    sentinels_failover: Future[str],
) -> None:
    print(f"\nfigures: {sentinels_failover.result()}")
