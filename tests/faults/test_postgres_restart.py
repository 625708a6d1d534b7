"""The PostgreSQL run store restarted mid-load (a cluster of the test's own, not the shared one): nothing
is lost, and every run resumes once the server is back.

Figures (how long after the restart steps ran again, the store calls that failed) are printed; run with
``-s`` to see them.

The two cases run side by side, each on a cluster of its own with a namespace and a worker of its own, in
threads of their own from the first case on (``tests/support/overlap.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from pipelines import RunStatus, chain, step
from tests.faults.conftest import scenario
from tests.support.backends import schema_of
from tests.support.faults.fault_scenario import Fault
from tests.support.faults.postgres_faults import Aftermath, assert_nothing_lost, settle
from tests.support.housekeeping import fresh_namespace
from tests.support.overlap import side_by_side, start_with_the_first_test
from tests.support.own_postgres import OwnPostgres, missing_binaries

CHAINS = 200
STEPS = 3 * CHAINS
THREADS = 8
#: Seconds each step's body takes: long enough that the restart lands mid-load, with idle pooled connections.
WORK_S = 0.05
#: How long the server stays down in the second case (the first starts it at once, as `pg_ctl restart`):
#: steps are claimed, finished and recorded meanwhile, none of it answered.
OUTAGE_S = 2.0
#: Longest the runs may take to settle once the server is back.
SETTLE_S = 45.0


@dataclass
class Restarted:
    """A restart's scenario (kept until the module's tests are over) and what the test saw of it."""

    fault: Fault
    server: OwnPostgres
    before: int
    down_s: float
    resumed_s: float
    settled_s: float
    statuses: list[RunStatus]
    test_calls_failed: int


def close(fault: Fault | None, server: OwnPostgres, delete_namespace: Callable[[str], None]) -> None:
    """What the ``on_own_postgres`` and ``own_postgres`` fixtures do after a test."""
    try:
        if fault is not None:
            fault.discard(delete_namespace)
    finally:
        server.close()


def restart(outage_s: float, log: Path, delete_namespace: Callable[[str], None]) -> Restarted:
    """The load on a PostgreSQL cluster of its own (made and started here), stopped mid-load and started
    again ``outage_s`` later; the scenario, still running."""
    problem = missing_binaries()
    if problem is not None:
        pytest.fail(f"This test starts PostgreSQL of its own, and {problem}.", pytrace=False)
    own_postgres = OwnPostgres()
    fault: Fault | None = None
    try:
        own_postgres.init()
        own_postgres.start()
        namespace = fresh_namespace()
        fault = scenario(namespace, log, store={"url": own_postgres.url(), "postgres_schema": schema_of(namespace)})
        chain_step = fault.actors["chain_step"]
        runs = [fault.app.start(chain(*[step(chain_step, f"c{n}")] * 3), args=(0,)) for n in range(CHAINS)]
        fault.workers.env["FAULT_WORK_S"] = str(WORK_S)
        fault.workers.start(threads=THREADS)
        ledger = fault.ledger

        def started() -> set[str]:
            return set(ledger.count("chain", "executions"))

        fault.wait_count(lambda: len(ledger.count("chain", "effects")), STEPS // 3, "a third of the steps done")
        own_postgres.stop()
        stopped = time.monotonic()
        time.sleep(outage_s)  # the outage itself: there is nothing to wait for
        before = started()
        own_postgres.start()
        back = time.monotonic()
        fault.wait_until(lambda: started() - before, "a step started after the restart", timeout_s=SETTLE_S)
        resumed_s = time.monotonic() - back
        statuses, test_calls_failed = settle(runs, back + SETTLE_S)
        settled_s = time.monotonic() - back
    except BaseException:
        close(fault, own_postgres, delete_namespace)
        raise
    return Restarted(
        fault, own_postgres, len(before), back - stopped, resumed_s, settled_s, statuses, test_calls_failed
    )


@pytest.fixture(scope="module")
def restarts(
    services: None, delete_namespace: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[float, Future[Restarted]]]:
    """Both cases, started side by side in threads of their own (``tests/support/overlap.py``); each
    scenario is closed once the module's tests are over."""
    logs = tmp_path_factory.mktemp("restarts")
    with side_by_side(
        {
            0.0: partial(restart, 0.0, logs / "restart.log", delete_namespace),
            OUTAGE_S: partial(restart, OUTAGE_S, logs / "outage.log", delete_namespace),
        },
        close=lambda restarted: close(restarted.fault, restarted.server, delete_namespace),
    ) as outcomes:
        yield outcomes


@pytest.fixture(scope="module", autouse=True)
def _restarts_from_the_first_test(request: pytest.FixtureRequest) -> None:
    start_with_the_first_test(request, "restarts")


@pytest.mark.parametrize("outage_s", [0.0, OUTAGE_S], ids=["restart", "outage"])
def test_a_postgresql_restart_mid_load_loses_nothing_and_every_run_resumes(
    restarts: dict[float, Future[Restarted]], outage_s: float
) -> None:
    outcome = restarts[outage_s].result()
    fault = outcome.fault
    after = Aftermath.of(fault)
    print(
        f"\nPostgreSQL down {outcome.down_s:.1f} s after {outcome.before}/{STEPS} steps had started: steps started "
        f"again {outcome.resumed_s:.1f} s after it was back, every run had succeeded {outcome.settled_s:.1f} s "
        f"after; store calls failed on a lost connection: {after.lost} in the worker ({after.idle_replaced} idle "
        f"lost ones replaced before use), {outcome.test_calls_failed} of the test's own; step bodies run again: "
        f"{after.re_executed}"
    )
    assert_nothing_lost(fault, outcome.statuses, [f"c{n}" for n in range(CHAINS)], after)
    # A body runs again only once its step's lease lapsed (store.step_lease_s): an outage this short lapses
    # none. An end not recorded meanwhile is recorded later, without running the body again.
    assert after.re_executed == 0
    # The test's own pool lost its connections with the server: one call failed at most, not one per connection.
    assert outcome.test_calls_failed <= 1
