"""The PostgreSQL run store restarted mid-load (a cluster of the test's own, not the shared one): nothing
is lost, and every run resumes once the server is back.

Figures (how long after the restart steps ran again, the store calls that failed) are printed; run with
``-s`` to see them.
"""

from __future__ import annotations

import time

import pytest

from pipelines import chain, step
from tests.support.faults.fault_scenario import Fault
from tests.support.faults.postgres_faults import Aftermath, assert_nothing_lost, settle
from tests.support.own_postgres import OwnPostgres

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


@pytest.mark.parametrize("outage_s", [0.0, OUTAGE_S], ids=["restart", "outage"])
def test_a_postgresql_restart_mid_load_loses_nothing_and_every_run_resumes(
    on_own_postgres: Fault, own_postgres: OwnPostgres, outage_s: float
) -> None:
    fault = on_own_postgres
    chain_step = fault.actors["chain_step"]
    runs = [fault.app.start(chain(*[step(chain_step, f"c{n}")] * 3), args=(0,)) for n in range(CHAINS)]
    fault.workers.env["FAULT_WORK_S"] = str(WORK_S)
    fault.workers.start(threads=THREADS)

    def started() -> set[str]:
        return set(fault.ledger.count("chain", "executions"))

    fault.wait_count(lambda: len(fault.ledger.count("chain", "effects")), STEPS // 3, "a third of the steps done")
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

    after = Aftermath.of(fault)
    print(
        f"\nPostgreSQL down {back - stopped:.1f} s after {len(before)}/{STEPS} steps had started: steps started "
        f"again {resumed_s:.1f} s after it was back, every run had succeeded {settled_s:.1f} s after; store calls "
        f"failed on a lost connection: {after.lost} in the worker ({after.idle_replaced} idle lost ones replaced "
        f"before use), {test_calls_failed} of the test's own; step bodies run again: {after.re_executed}"
    )
    assert_nothing_lost(fault, statuses, [f"c{n}" for n in range(CHAINS)], after)
    # A body runs again only once its step's lease lapsed (store.step_lease_s): an outage this short lapses
    # none. An end not recorded meanwhile is recorded later, without running the body again.
    assert after.re_executed == 0
    # The test's own pool lost its connections with the server: one call failed at most, not one per connection.
    assert test_calls_failed <= 1
