"""The PostgreSQL run store's primary killed mid-load and its synchronous standby promoted (clusters of the
test's own, both named in store.url): no run the producer saw created is lost, and every run succeeds.

Figures (how long after the kill steps ran again and every run had succeeded, the store calls that failed,
the bodies run twice) are printed; run with ``-s`` to see them.

The two cases run side by side, each on a pair of its own with a namespace and a worker of its own, in
threads of their own from the first case on (``tests/support/overlap.py``): their waits (for the
promotion, for leases to lapse) overlap.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from pipelines import Run, RunStatus, chain, step
from pipelines.app import App
from pipelines.errors import StoreUnavailable
from pipelines.store.postgres import PostgresRunStore
from tests.faults.conftest import scenario
from tests.support.backends import schema_of
from tests.support.faults.fault_scenario import Fault
from tests.support.faults.postgres_faults import Aftermath, assert_nothing_lost, settle
from tests.support.housekeeping import fresh_namespace
from tests.support.overlap import side_by_side, start_with_the_first_test
from tests.support.own_postgres import OwnReplicatedPostgres, missing_binaries

CHAINS = 200
STEPS = 3 * CHAINS
THREADS = 8
#: Seconds each step's body takes: long enough that the kill lands mid-load, with idle pooled connections.
WORK_S = 0.05
#: Seconds between two of the producer's starts until the kill: it is still starting runs when the primary dies
#: (it starts the rest at once after).
PACE_S = 0.02
#: How long the second case leaves the store without a primary, as a failover manager that waits for the
#: old primary's lease to lapse before it promotes the standby.
DOWN_S = 8.0
#: Longest the runs may take to settle, and the producer to start them all, once the standby is promoted.
SETTLE_S = 45.0


class Producer(threading.Thread):
    """Starts ``CHAINS`` three-step chains, one every ``pace_s``, counting the starts the store failed (their
    runs are not the test's: the producer was never told they were created, so nothing of them was published)."""

    def __init__(self, app: App, chain_step: Any, deadline: float) -> None:
        super().__init__(name="producer", daemon=True)
        self.app = app
        self.chain_step = chain_step
        self.deadline = deadline
        self.pace_s = PACE_S
        self.started: list[tuple[str, Run[int]]] = []
        self.failed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for n in itertools.count():
                if len(self.started) == CHAINS or time.monotonic() > self.deadline:
                    return
                try:
                    tag = f"c{n}"
                    self.started.append((tag, self.app.start(chain(*[step(self.chain_step, tag)] * 3), args=(0,))))
                except StoreUnavailable:
                    self.failed += 1
                time.sleep(self.pace_s)  # the pace of the load: there is nothing to wait for
        except BaseException as e:  # said by the test, which joins this thread
            self.error = e

    def runs(self) -> list[tuple[str, Run[int]]]:
        self.join(max(self.deadline - time.monotonic(), 0.1))
        assert not self.is_alive(), f"the producer had started {len(self.started)}/{CHAINS} runs by its deadline"
        assert self.error is None, f"the producer failed: {self.error!r}"
        assert len(self.started) == CHAINS, f"the producer started {len(self.started)}/{CHAINS} runs"
        return self.started


def fault_store(fault: Fault) -> PostgresRunStore:
    """A store of the scenario's settings, made now: its first call connects anew."""
    settings = fault.app.settings.store
    return PostgresRunStore(
        url=settings.url, namespace=fault.app.settings.namespace, retention_s=60, schema=settings.postgres_schema
    )


@dataclass
class FailedOver:
    """A failover's scenario (kept until the module's tests are over) and what the test saw of it."""

    fault: Fault
    pair: OwnReplicatedPostgres
    seen: int
    before: int
    runs: list[tuple[str, Run[int]]]
    statuses: list[RunStatus]
    test_calls_failed: int
    producer_failed: int
    promoted_s: float
    resumed_s: float
    settled_s: float


def close(fault: Fault | None, pair: OwnReplicatedPostgres, delete_namespace: Callable[[str], None]) -> None:
    """What the ``on_replicated_postgres`` and ``own_replicated_postgres`` fixtures do after a test."""
    try:
        if fault is not None:
            fault.discard(delete_namespace)
    finally:
        pair.close()


def fail_over(down_s: float, log: Path, delete_namespace: Callable[[str], None]) -> FailedOver:
    """The load on a primary and its synchronous standby of their own (made and started here), the
    primary killed mid-load and the standby promoted ``down_s`` later; the scenario, still running."""
    problem = missing_binaries()
    if problem is not None:
        pytest.fail(f"This test starts PostgreSQL of its own, and {problem}.", pytrace=False)
    pair = OwnReplicatedPostgres()
    fault: Fault | None = None
    try:
        pair.start()
        namespace = fresh_namespace()
        fault = scenario(namespace, log, store={"url": pair.url(), "postgres_schema": schema_of(namespace)})
        schema = fault.app.settings.store.postgres_schema
        fault.workers.env["FAULT_WORK_S"] = str(WORK_S)
        fault.workers.start(threads=THREADS)
        producer = Producer(fault.app, fault.actors["chain_step"], time.monotonic() + SETTLE_S)
        producer.start()

        def started() -> set[str]:
            return set(fault.ledger.count("chain", "executions"))

        fault.wait_count(lambda: len(fault.ledger.count("chain", "effects")), STEPS // 3, "a third of the steps done")
        seen = [run.id for _, run in producer.started]  # every start that returned: the producer saw these runs
        before = started()
        pair.primary.kill()
        killed = time.monotonic()
        producer.pace_s = 0.0
        if down_s:  # a call meanwhile is told that only a standby answers, not that nothing does
            with pytest.raises(StoreUnavailable, match="has no server that takes writes"):
                fault_store(fault).ping()
        time.sleep(max(down_s - (time.monotonic() - killed), 0))  # no primary meanwhile: there is nothing to wait for
        pair.promote()
        promoted_s = time.monotonic() - killed
        # Synchronous replication: a commit was answered once the standby had it, so no run the producer saw is lost.
        found = pair.standby.sql(f'SELECT run_id FROM "{schema}".runs WHERE run_id = ANY(%s)', seen)
        assert {run_id for (run_id,) in found} == set(seen)
        fault.wait_until(lambda: started() - before, "a step started after the failover", timeout_s=SETTLE_S)
        resumed_s = time.monotonic() - killed
        runs = producer.runs()
        statuses, test_calls_failed = settle([run for _, run in runs], killed + SETTLE_S)
        settled_s = time.monotonic() - killed
    except BaseException:
        close(fault, pair, delete_namespace)
        raise
    return FailedOver(
        fault,
        pair,
        len(seen),
        len(before),
        runs,
        statuses,
        test_calls_failed,
        producer.failed,
        promoted_s,
        resumed_s,
        settled_s,
    )


@pytest.fixture(scope="module")
def failovers(
    services: None, delete_namespace: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[float, Future[FailedOver]]]:
    """Both cases, started side by side in threads of their own (``tests/support/overlap.py``); each
    scenario is closed once the module's tests are over."""
    logs = tmp_path_factory.mktemp("failovers")
    with side_by_side(
        {
            0.0: partial(fail_over, 0.0, logs / "at-once.log", delete_namespace),
            DOWN_S: partial(fail_over, DOWN_S, logs / "later.log", delete_namespace),
        },
        close=lambda failed_over: close(failed_over.fault, failed_over.pair, delete_namespace),
    ) as outcomes:
        yield outcomes


@pytest.fixture(scope="module", autouse=True)
def _failovers_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "failovers")


@pytest.mark.parametrize("down_s", [0.0, DOWN_S], ids=["promoted-at-once", "promoted-later"])
def test_a_primary_killed_mid_load_loses_no_run_once_its_synchronous_standby_is_promoted_and_every_run_succeeds(
    failovers: dict[float, Future[FailedOver]], down_s: float
) -> None:
    outcome = failovers[down_s].result()
    fault, runs = outcome.fault, outcome.runs
    after = Aftermath.of(fault)
    print(
        f"\nPrimary killed after {outcome.before}/{STEPS} steps had started and {outcome.seen}/{CHAINS} runs were "
        f"created (all {outcome.seen} found on the standby); standby promoted {outcome.promoted_s:.1f} s after the "
        f"kill; steps started again {outcome.resumed_s:.1f} s after the kill, every run had succeeded "
        f"{outcome.settled_s:.1f} s after; store calls failed: {after.calls_failed} in the worker ({after.lost} on a "
        f"lost connection, and {after.idle_replaced} idle lost ones replaced before use), "
        f"{outcome.test_calls_failed} of the test's waits, {outcome.producer_failed} of the producer's starts; step "
        f"bodies run again: {after.re_executed}"
    )
    assert_nothing_lost(fault, outcome.statuses, [tag for tag, _ in runs], after)
