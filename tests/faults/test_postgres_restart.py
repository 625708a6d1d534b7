"""The PostgreSQL run store restarted mid-load (a cluster of the test's own, not the shared one): nothing
is lost, and every run resumes once the server is back.

Figures (how long after the restart steps ran again, the store calls that failed) are printed; run with
``-s`` to see them.
"""

from __future__ import annotations

import time

import pytest

from pipelines import Run, RunStatus, chain, step
from pipelines.errors import StoreUnavailable
from tests.support.faults.fault_scenario import Fault
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


def settle(runs: list[Run[int]], deadline: float) -> tuple[list[RunStatus], int]:
    """Every run's final status (awaited through the store's notifications), and how many of the test's own
    calls the store failed on the way (its pooled connections went down with the server too)."""
    statuses, failed = [], 0
    for run in runs:
        while True:
            try:
                statuses.append(run.wait(max(deadline - time.monotonic(), 0.1)))
                break
            except StoreUnavailable:
                failed += 1
                assert time.monotonic() < deadline, f"the store still fails the test's calls on run {run.id}"
    return statuses, failed


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

    effects = fault.ledger.count("chain", "effects")
    executions = fault.ledger.count("chain", "executions")
    re_executed = sum(count - 1 for count in executions.values())
    text = fault.log.read_text(errors="replace")
    # psycopg's pool says which connections it found lost: one a call failed on, or one idle and tested.
    worker_calls_failed = text.count("discarding closed connection")
    idle_replaced = text.count("discarding broken connection")
    print(
        f"\nPostgreSQL down {back - stopped:.1f} s after {len(before)}/{STEPS} steps had started: steps started "
        f"again {resumed_s:.1f} s after it was back, every run had succeeded {settled_s:.1f} s after; store calls "
        f"failed on a lost connection: {worker_calls_failed} in the worker ({idle_replaced} idle lost ones replaced "
        f"before use), {test_calls_failed} of the test's own; step bodies run again: {re_executed}"
    )
    assert [status.state for status in statuses] == ["succeeded"] * CHAINS
    assert all(status.result == 3 for status in statuses)
    assert set(effects) == {f"c{n}:{value}" for n in range(CHAINS) for value in range(3)}
    # A body runs again only once its step's lease lapsed (store.step_lease_s): an outage this short lapses
    # none. An end not recorded meanwhile is recorded later, without running the body again.
    assert re_executed == 0
    # The test's own pool lost its connections with the server: one call failed at most, not one per connection.
    assert test_calls_failed <= 1
    assert fault.app.dead_letters.list() == []
    assert not fault.workers.died()
