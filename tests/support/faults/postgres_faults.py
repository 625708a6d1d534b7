"""What the PostgreSQL store's fault tests await and count: every run settled through the store's failures,
and what the ledger and the worker's log say of the load once it has."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipelines import Run, RunStatus
from pipelines.errors import StoreUnavailable
from tests.support.faults.fault_scenario import Fault


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


@dataclass(frozen=True)
class Aftermath:
    """The chain steps' effects and bodies run again (the ledger), and the store's failures (the worker's log)."""

    effects: set[str]
    re_executed: int
    #: Calls the store failed in the worker (each logged with its StoreUnavailable, which names the server).
    calls_failed: int
    #: Calls that failed on a lost connection (psycopg's pool discards the connection after the call).
    lost: int
    #: Idle connections the pool tested, found lost and replaced before any call used them.
    idle_replaced: int

    @classmethod
    def of(cls, fault: Fault) -> Aftermath:
        executions = fault.ledger.count("chain", "executions")
        text = fault.log.read_text(errors="replace")
        return cls(
            effects=set(fault.ledger.count("chain", "effects")),
            re_executed=sum(count - 1 for count in executions.values()),
            calls_failed=text.count("PostgreSQL at "),
            lost=text.count("discarding closed connection"),
            idle_replaced=text.count("discarding broken connection"),
        )


def assert_nothing_lost(fault: Fault, statuses: list[RunStatus], tags: list[str], after: Aftermath) -> None:
    """Every run of the chains ``tags`` names succeeded with its result (3, after three steps), every step's
    effect is in the ledger, nothing was dead-lettered and the worker lived."""
    assert [status.state for status in statuses] == ["succeeded"] * len(tags)
    assert all(status.result == 3 for status in statuses)
    assert after.effects == {f"{tag}:{value}" for tag in tags for value in range(3)}
    assert fault.app.dead_letters.list() == []
    assert not fault.workers.died()
