"""Runs on a Redis Cluster store whose busiest primary is SIGKILLed mid-run and replaced by its replica.

A stock ``dramatiq`` worker (the stall test's helper module: one chain step whose effect is keyed by
``current_effect_key()`` in the README's PostgreSQL table, whose primary key is the effect key, every
execution counted in a second table) works through chains on RabbitMQ while their store loses a primary.
What the store had acknowledged but not yet replicated is lost with it (replication is asynchronous): a
step may run again, but with the same effect key (an effect key that changed would add a row), and
nothing may be lost or left running. Figures are printed (``-s``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import dramatiq
import pytest
from local_redis import LocalRedisCluster

from pipelines import chain, step
from pipelines.app import build_app
from pipelines.config import Settings
from pipelines.naming import run_key
from pipelines.store import RedisRunStore
from tests.backends import AMQP_URL, TEST_DELAY_TIERS_S
from tests.housekeeping import fresh_namespace, start_process, stop_process

HELPERS = Path(__file__).resolve().parents[1] / "fail_closed" / "helpers"
sys.path.insert(0, str(HELPERS))

from fail_closed_support import Effects  # noqa: E402  (found on the path above)

from tests.backends import POSTGRES_URL  # noqa: E402

pytestmark = pytest.mark.cluster

CHAINS = 300
STEPS = 3
TIMEOUT_S = 150


@pytest.fixture
def effects() -> Iterator[tuple[Effects, Effects]]:
    """The keyed effects (``<table>``, the effect key its primary key) and every execution (``<table>_runs``)."""
    table = Effects(f"fc_{uuid.uuid4().hex[:12]}", keyed=True)
    runs = Effects(f"{table.table}_runs")
    yield table, runs
    runs.drop()
    table.drop()


def _wait(done: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what} after {timeout_s} s; worker log:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)  # progress is made in other processes, in PostgreSQL: nothing to subscribe to


@pytest.mark.timeout(300)
def test_runs_survive_the_sigkill_of_a_store_primary_with_each_keyed_effect_once(
    redis_cluster: LocalRedisCluster,
    delete_namespace: Callable[[str], None],
    effects: tuple[Effects, Effects],
    tmp_path: Path,
) -> None:
    keyed_effects, executions = effects
    namespace = fresh_namespace()
    store_url = f"redis+cluster://127.0.0.1:{redis_cluster.servers[0].port},127.0.0.1:{redis_cluster.servers[1].port}"
    values = {
        "namespace": namespace,
        "broker": {"url": AMQP_URL, "delay_tiers_s": TEST_DELAY_TIERS_S},
        "store": {"url": store_url, "step_lease_s": 8},
        "worker": {"time_limit_s": 5},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_BROKER__DELAY_TIERS_S": str(TEST_DELAY_TIERS_S).replace(" ", ""),
        "PIPELINES_STORE__URL": store_url,
        "PIPELINES_STORE__STEP_LEASE_S": "8",
        "PIPELINES_WORKER__TIME_LIMIT_S": "5",
        "PIPELINES_LOGGING__LEVEL": "WARNING",
        "FC_EFFECTS_TABLE": keyed_effects.table,
        "FC_POSTGRES_URL": POSTGRES_URL,
        "FC_WORK_S": "0.05",
    }
    app = build_app(Settings.from_values(values))
    worker: subprocess.Popen[bytes] | None = None
    log = tmp_path / "worker.log"
    try:
        ledger_step = dramatiq.actor(broker=app.broker, actor_name="ledger_step")(_signature)
        runs = [app.start(chain(*[step(ledger_step, f"c{n}")] * STEPS), args=(0,)) for n in range(CHAINS)]
        by_primary = Counter(redis_cluster.primary_of(run_key(namespace, run.id)) for run in runs)
        busiest, _ = by_primary.most_common(1)[0]
        replicas = redis_cluster.primaries()[busiest]
        with log.open("ab") as out:
            worker = start_process(
                [str(Path(sys.executable).parent / "dramatiq"), "stall_worker", "--path", str(HELPERS)],
                env=env,
                cwd=HELPERS.parents[2],
                stdout=out,
                stderr=out,
            )
        _wait(lambda: sum(executions.counts().values()) >= CHAINS * STEPS // 3, 90, "a third of the work not done", log)
        redis_cluster.kill(busiest)
        killed_at = time.monotonic()
        promoted = redis_cluster.wait_promoted(busiest, replicas)
        promoted_s = time.monotonic() - killed_at
        redis_cluster.restart(busiest)  # it rejoins as a replica of the promoted one

        statuses = [run.wait(timeout_s=TIMEOUT_S) for run in runs]
        keyed = keyed_effects.counts()
        ran = executions.counts()
        print(
            f"\nfigures: store primary {busiest} (holding {by_primary[busiest]} of {CHAINS} runs) SIGKILLed with "
            f"{CHAINS} chains x {STEPS} steps under way, replica {promoted} promoted after {promoted_s:.1f} s: "
            f"runs succeeded {sum(s.state == 'succeeded' for s in statuses)}/{CHAINS}, "
            f"stuck {sum(not s.is_final for s in statuses)}, keyed effects {len(keyed)}, executions "
            f"{sum(ran.values())} (steps run more than once: {sum(c > 1 for c in ran.values())}, their second "
            f"inserts absorbed by the key), dead letters {len(app.dead_letters.list())}"
        )
        assert all(status.state == "succeeded" and status.result == STEPS for status in statuses)
        # One row per step: an effect key that changed between two runs of a step would add a row.
        assert set(keyed) == {f"{run.id}:0.{index}" for run in runs for index in range(STEPS)}
    finally:
        if worker is not None:
            stop_process(worker)
        assert isinstance(app.store, RedisRunStore)
        app.store.delete_namespace()  # the cluster's keys
        app.close()
        delete_namespace(namespace)  # the queues and exchanges


def _signature(tag: str, value: int) -> int:
    """The producer's stand-in for the worker's ``ledger_step`` (only its name and parameters matter)."""
    raise NotImplementedError
