"""The broker on a three-node RabbitMQ cluster loses nodes under load: a producer in this process and a
worker process (the stock ``dramatiq`` CLI) both given the three node URLs, quorum queues replicated on
all three. Keyed messages, three-step chains and chords are published while the node holding the
quorum-queue leaders is SIGKILLed, restarted, then another node stopped cleanly; or while one node is
cut off from the others. Nothing is lost, no keyed effect applied twice, no run stuck. Effects are
counted in PostgreSQL (no unique constraint); figures are printed (``-s``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.app import App, build_app
from pipelines.config.settings import Settings
from pipelines.store import RedisRunStore
from tests.support.backends import POSTGRES_URL
from tests.support.cluster.failover_load import (
    Load,
    Producer,
    discard_worker,
    execution_times,
    longest_pause,
    start_worker,
    wait_for_runs,
)
from tests.support.cluster.local_rabbit import RabbitCluster, RabbitNode
from tests.support.cluster.local_slot import wait_for
from tests.support.fail_closed.fail_closed_support import Effects
from tests.support.housekeeping import fresh_namespace

pytestmark = pytest.mark.cluster

REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: A step whose acknowledgement was lost with its node is redelivered; its lease bounds the wait.
LEASE_S = 5.0
#: Longest the runs may take to finish once the faults are over and everything is published.
SETTLE_S = 60.0
#: Longest the cluster may take to show a fault, or a node to boot again.
CLUSTER_S = 90.0
#: Workers started at most to get one whose consumer is on the leaders' node (each has a third's chance).
WORKER_STARTS = 12
#: The kill-and-stop test's work: 2,000 keyed messages, 300 three-step chains, 50 chords of 20 (3,950
#: executions), published over a minute: the kill, the restart and the stop land in its first half, even
#: when the cluster is slow to reach the kill (once 100 executions are recorded: up to about 33 s seen).
KILL_AND_STOP_LOAD = Load(keyed=2000, chains=300, chords=50, width=20)
KILL_AND_STOP_SPAN_S = 60.0
#: The partition test's work (364 executions), published over 30 s. The cut comes a few seconds in (once
#: 30 executions are recorded), the node stops serving about 11 s later (``net_ticktime`` 10 s), and
#: the heal follows 30 more executions: about 15 to 20 s in, the rest of the load arriving after it.
PARTITION_LOAD = Load(keyed=200, chains=40, chords=4, width=10)
PARTITION_SPAN_S = 30.0


@pytest.fixture
def effects() -> Iterator[Effects]:
    """The keyed effects (``<table>``) and every execution (``<table>_runs``)."""
    table = Effects(f"cl_{uuid.uuid4().hex[:12]}")
    executions = Effects(f"{table.table}_runs")
    yield table
    executions.drop()
    table.drop()


@pytest.fixture
def cluster_app(rabbit_cluster: RabbitCluster) -> Iterator[App]:
    """An app on the cluster's three nodes (quorum queues on all three), its namespace deleted after."""
    namespace = fresh_namespace()
    settings = Settings.from_values(
        {
            "namespace": namespace,
            "broker": {"url": ",".join(rabbit_cluster.urls), "quorum_initial_group_size": 3},
            "store": {"url": REDIS_URL, "step_lease_s": LEASE_S},
        }
    )
    app = build_app(settings)
    yield app
    rabbit_cluster.ensure_healthy()
    app.broker.delete_topology()  # type: ignore[union-attr]
    app.close()
    RedisRunStore(url=REDIS_URL, namespace=namespace, retention_s=60).delete_namespace()


def worker_env(app: App, table: str) -> dict[str, str]:
    settings = app.settings
    return {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": settings.namespace,
        "PIPELINES_BROKER__URL": settings.broker.url,
        "PIPELINES_BROKER__QUORUM_INITIAL_GROUP_SIZE": str(settings.broker.quorum_initial_group_size),
        "PIPELINES_STORE__URL": settings.store.url,
        "PIPELINES_STORE__STEP_LEASE_S": str(LEASE_S),
        "PIPELINES_LOGGING__LEVEL": "WARNING",
        "CL_EFFECTS_TABLE": table,
        "CL_POSTGRES_URL": POSTGRES_URL,
    }


def consumers_by_node(cluster: RabbitCluster, namespace: str, via: RabbitNode) -> Counter[str]:
    """How many of the namespace's consumers each node serves (a channel's process, as the table
    format prints it, ``<pc1@10.213.6.1.123.456.0>``, names its node; the JSON format does not)."""
    listed = cluster.ctl(via, "list_consumers", "queue_name", "channel_pid", "--no-table-headers")
    rows = [line.split("\t") for line in listed.splitlines() if "\t" in line]
    return Counter(
        node.name
        for queue, pid in rows
        if queue.startswith(f"{namespace}.")
        for node in cluster.nodes
        if pid.startswith(f"<{node.name}.")
    )


class Scenario:
    """The worker, the producer and the effects of one test; :meth:`finish` checks the outcome."""

    def __init__(
        self, cluster: RabbitCluster, app: App, effects: Effects, tmp_path: Path, *, load: Load, span_s: float
    ) -> None:
        self.cluster = cluster
        self.app = app
        self.effects = effects
        self.load = load
        self.executions = Effects.__new__(Effects)  # the fixture made and drops the table
        self.executions.table = f"{effects.table}_runs"
        self.log = tmp_path / "worker.log"
        self.producer = Producer(app, load, span_s)
        app.broker.ensure_topology()  # type: ignore[union-attr]
        self.leaders = cluster.busiest_node()
        """The node the topology was declared through: every quorum queue's leader."""
        self.worker = self._worker_served_by(self.leaders)
        self.producer.start()

    def _worker_served_by(self, node: RabbitNode) -> subprocess.Popen[bytes]:
        """A worker whose consumer is on ``node`` (each picks a node at random: started again until so),
        so that losing the leaders' node also loses the worker's consumer connection."""
        namespace = self.app.settings.namespace
        for _ in range(WORKER_STARTS):
            worker = start_worker(worker_env(self.app, self.effects.table), self.log)
            try:
                wait_for(lambda: sum(consumers_by_node(self.cluster, namespace, node).values()) > 0, "a consumer", 60)
            except TimeoutError:
                discard_worker(worker)
                raise AssertionError(f"the worker did not consume; its log:\n{self.tail()}") from None
            except BaseException:  # interrupted (Ctrl-C): no test owns this worker yet, so stop it here
                discard_worker(worker)
                raise
            if consumers_by_node(self.cluster, namespace, node)[node.name]:
                return worker
            discard_worker(worker)
            wait_for(lambda: not consumers_by_node(self.cluster, namespace, node), "its consumers to go", 30)
        raise AssertionError(f"no worker of {WORKER_STARTS} consumed on {node.name}")

    def executed(self) -> int:
        return sum(self.executions.counts().values())

    def progressed(self, by: int, timeout_s: float = CLUSTER_S) -> None:
        """Wait until ``by`` more executions are recorded (work goes on), or every execution of the load:
        a producer held up by a fault publishes what it owes at once, and the worker may finish it all
        before this is called."""
        target = min(self.executed() + by, self.load.executions)
        try:
            wait_for(lambda: self.executed() >= target, f"{by} more executions", timeout_s, interval_s=0.2)
        except TimeoutError:
            raise AssertionError(
                f"no progress: {self.executed()} of {self.load.executions} executions recorded, the producer "
                f"{self._producer_state()}; worker log tail:\n{self.tail()}"
            ) from None

    def _producer_state(self) -> str:
        """Whether work was still coming: a worker left with nothing to do makes no progress either."""
        producer = self.producer
        if producer.failure is not None:
            return f"stopped by {type(producer.failure).__name__}: {producer.failure}"
        return "done" if producer.done.is_set() else "still publishing"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def finish(self) -> str:
        """Assert that nothing was lost, applied twice or left running; returns the figures."""
        self.producer.wait(CLUSTER_S + self.producer.span_s)
        states = wait_for_runs(self.producer.runs, SETTLE_S)
        runs = {run.id: run for run in self.producer.runs}

        def every_keyed_message_applied() -> bool:
            # A keyed message put off while the store did not answer comes back seconds after the runs end.
            return sum(key.split(":", 1)[0] not in runs for key in self.effects.counts()) >= self.load.keyed

        with contextlib.suppress(TimeoutError):  # the assertions below say what is missing
            wait_for(every_keyed_message_applied, "every keyed message's effect", SETTLE_S, interval_s=0.5)
        keyed = self.effects.counts()
        ran = self.executions.counts()
        of_runs = [key for key in keyed if key.split(":", 1)[0] in runs]
        messages = [key for key in keyed if key.split(":", 1)[0] not in runs]
        load = self.load
        figures = (
            f"runs {dict(states)} of {len(runs)} started ({load.chains} chains of 3, {load.chords} chords of "
            f"{load.width}), keyed messages with an effect {len(messages)}/{load.keyed}, effects applied twice "
            f"{sum(c > 1 for c in keyed.values())}, executions {sum(ran.values())} (again after a fault: "
            f"{sum(c - 1 for c in ran.values())}), publishes the producer had to repeat {len(self.producer.errors)}"
            + "".join(f"\n  repeated after: {error}" for error in self.producer.errors[:3])
        )
        print(f"\nfigures: {figures}")
        assert states == {"succeeded": len(runs)}, f"{figures}\nworker log tail:\n{self.tail()}"
        assert len(messages) == load.keyed, figures
        assert len(of_runs) == load.chains * 3 + load.chords * (load.width + 1), figures
        assert set(keyed.values()) == {1}, figures
        return figures

    def close(self) -> None:
        discard_worker(self.worker)


# The first test also waits for the cluster to start.
@pytest.mark.timeout(420)
def test_work_goes_on_when_the_leaders_node_is_killed_restarted_and_another_node_stopped(
    rabbit_cluster: RabbitCluster, cluster_app: App, effects: Effects, tmp_path: Path
) -> None:
    load = KILL_AND_STOP_LOAD
    scenario = Scenario(rabbit_cluster, cluster_app, effects, tmp_path, load=load, span_s=KILL_AND_STOP_SPAN_S)
    try:
        scenario.progressed(100)
        replicas = {q["name"]: len(q["members"]) for q in rabbit_cluster.quorum_queues()}
        assert {n for q, n in replicas.items() if q.startswith(f"{cluster_app.settings.namespace}.")} == {3}
        # The node holding the most leaders now: an election under load can move some off the node that
        # declared them (and holds the worker's consumer) before the fault.
        victim = rabbit_cluster.busiest_node()
        survivor = next(node for node in rabbit_cluster.nodes if node is not victim)
        leaders = rabbit_cluster.leader_counts()[victim.name]
        namespace = cluster_app.settings.namespace
        consumers_killed = consumers_by_node(rabbit_cluster, namespace, survivor)[victim.name]
        killed_at = time.time()
        rabbit_cluster.kill(victim)
        wait_for(lambda: victim.name not in rabbit_cluster.running_nodes(via=survivor), "the kill", CLUSTER_S)
        scenario.progressed(50)
        back_s = rabbit_cluster.restart(victim)
        back_at = time.time()
        scenario.progressed(50)
        # The other node that serves the worker's consumer (if any): its clean stop moves them.
        serving = consumers_by_node(rabbit_cluster, namespace, victim)
        stopped = max((node for node in rabbit_cluster.nodes if node is not victim), key=lambda n: serving[n.name])
        consumers_stopped = serving[stopped.name]
        stopped_at = time.time()
        rabbit_cluster.stop(stopped)
        scenario.progressed(20)
        figures = scenario.finish()
        finished_at = time.time()
    finally:
        scenario.close()
    times = execution_times(POSTGRES_URL, effects.table)
    stop_pause = longest_pause(times, stopped_at, min(finished_at, scenario.producer.finished_at))
    print(
        f"figures: SIGKILL of {victim.name} (leader of {leaders} quorum queues, serving {consumers_killed} of the "
        f"worker's consumers): work stood still at most "
        f"{longest_pause(times, killed_at, back_at):.1f} s until it was back ({back_s:.1f} s to restart and "
        f"rejoin); clean stop of {stopped.name} (serving {consumers_stopped} consumers): at most {stop_pause:.1f} s; "
        f"{figures}"
    )


@pytest.mark.timeout(240)
def test_a_node_cut_off_from_the_others_stops_serving_and_nothing_is_lost_when_it_heals(
    rabbit_cluster: RabbitCluster, cluster_app: App, effects: Effects, tmp_path: Path
) -> None:
    load = PARTITION_LOAD
    scenario = Scenario(rabbit_cluster, cluster_app, effects, tmp_path, load=load, span_s=PARTITION_SPAN_S)
    try:
        scenario.progressed(30)
        cut = rabbit_cluster.busiest_node()  # as for the kill: the node holding the most leaders now
        majority = next(node for node in rabbit_cluster.nodes if node is not cut)
        leaders = rabbit_cluster.leader_counts()[cut.name]
        consumers_cut = consumers_by_node(rabbit_cluster, cluster_app.settings.namespace, majority)[cut.name]
        cut_at = time.time()
        rabbit_cluster.partition(cut)
        wait_for(lambda: not cut.serving(), f"{cut.name} to stop serving (pause_minority)", CLUSTER_S)
        paused_s = time.time() - cut_at
        rabbit_cluster.wait_running({n.name for n in rabbit_cluster.nodes if n is not cut}, via=majority)
        scenario.progressed(30)
        healed_at = time.time()
        rabbit_cluster.heal(cut)
        rejoined = rabbit_cluster.wait_rejoined(cut)
        figures = scenario.finish()
    finally:
        scenario.close()
    times = execution_times(POSTGRES_URL, effects.table)
    print(
        f"figures: {cut.name} (leader of {leaders} quorum queues, serving {consumers_cut} consumers) cut off: "
        f"stopped serving after {paused_s:.1f} s, work stood still at most "
        f"{longest_pause(times, cut_at, healed_at):.1f} s while it was cut off; served again {rejoined.seconds:.1f} s "
        f"after the heal{rejoined.note()}; {figures}"
    )
