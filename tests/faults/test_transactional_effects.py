"""The PostgreSQL store's transactions under faults: a step's write in ``pipelines.transaction()`` happens
once through worker kills, with no key of the user's; a start committed by a producer killed right after
its commit still runs.

Figures (steps, kills, rows, bodies run again) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from pipelines import chain, step
from pipelines.store.postgres import PostgresRunStore
from tests.faults.conftest import LEASE_S, TIME_LIMIT_S, scenario
from tests.support.backends import POSTGRES_URL, schema_of
from tests.support.faults.fault_scenario import ROOT, Fault
from tests.support.faults.transaction_actors import TABLE_VARIABLE, create_table, declare, drop_table, rows_by_step
from tests.support.housekeeping import fresh_namespace

CHAINS = 250
STEPS = 4
KILLS = 4


@pytest.fixture
def pg_fault(services: None, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    """A fault scenario on the PostgreSQL store, with a table of effects of its own."""
    namespace = fresh_namespace()
    made = scenario(
        namespace,
        tmp_path / "worker.log",
        store={"url": POSTGRES_URL, "postgres_schema": schema_of(namespace), "step_lease_s": LEASE_S},
        worker={"time_limit_s": TIME_LIMIT_S},
    )
    table = f"effects_{schema_of(namespace)}"
    create_table(POSTGRES_URL, table)
    made.workers.env[TABLE_VARIABLE] = table
    yield made
    made.workers.discard()
    made.ledger.clear()
    drop_table(POSTGRES_URL, table)
    assert isinstance(made.app.store, PostgresRunStore)
    made.app.store.drop_schema()
    made.app.close()
    delete_namespace(namespace)


def test_killed_workers_write_each_steps_row_once(pg_fault: Fault) -> None:
    fault, table = pg_fault, pg_fault.workers.env[TABLE_VARIABLE]
    record = declare(fault.app.broker, fault.app.settings.namespace, table)["record"]
    with psycopg.connect(POSTGRES_URL) as conn, conn.transaction():
        runs = [
            fault.app.start(chain(*[step(record, f"c{n}")] * STEPS), args=(0,), connection=conn) for n in range(CHAINS)
        ]
    fault.workers.start(module="transaction_worker")
    total = CHAINS * STEPS
    for kill in range(1, KILLS + 1):
        # Kill whenever another slice of the rows is written, so every kill lands mid-run.
        fault.wait_count(lambda: sum(rows_by_step(POSTGRES_URL, table).values()), kill * total // (KILLS + 2), "rows")
        fault.workers.kill()
        fault.workers.start(module="transaction_worker")
    fault.wait_until(lambda: all(run.status().is_final for run in runs), "every chain settled")

    rows = rows_by_step(POSTGRES_URL, table)
    executions = fault.ledger.count("record", "executions")
    statuses = [run.status() for run in runs]
    twice = {key: count for key, count in rows.items() if count > 1}
    missing = [(f"c{n}", s) for n in range(CHAINS) for s in range(STEPS) if (f"c{n}", s) not in rows]
    print(
        f"\nkills: {fault.workers.kills}; steps: {total} ({CHAINS} chains x {STEPS}); rows: {sum(rows.values())}; "
        f"written twice: {len(twice)}; missing: {len(missing)}; bodies run again: "
        f"{sum(count - 1 for count in executions.values())} (each rolled back with its attempt)"
    )
    assert fault.workers.kills == KILLS
    assert twice == {}
    assert missing == []
    assert all(status.state == "succeeded" and status.result == STEPS for status in statuses)


def test_a_start_committed_by_a_producer_killed_before_any_publish_runs(pg_fault: Fault) -> None:
    fault = pg_fault
    producer = subprocess.run(
        [sys.executable, "-m", "tests.support.faults.transaction_producer"],
        env=fault.workers.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert producer.returncode == -9, producer.stderr[-2000:]
    run_id = producer.stdout.strip()
    assert fault.app.get_run(run_id).status().state == "pending"
    fault.workers.start(module="transaction_worker")
    assert fault.app.get_run(run_id).result(timeout_s=60) == 1
    assert rows_by_step(POSTGRES_URL, fault.workers.env[TABLE_VARIABLE]) == {("killed-producer", 0): 1}
