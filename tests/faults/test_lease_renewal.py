"""A step that runs many leases long on a live worker is never taken over: its process renews the lease.

The lease is short here (``LEASE_S``) so the step outlives three of them in seconds; the renewal is the
same as with the shipped lease, each quarter of it.
"""

from __future__ import annotations

import subprocess

from pipelines import step
from tests.support.faults.fault_scenario import Fault
from tests.support.housekeeping import rabbitmqctl

#: How many leases the step runs for, renewed all along.
LONG_STEPS_IN_LEASES = 3


def test_a_step_running_many_leases_long_on_a_live_worker_is_never_taken_over(renewing: Fault) -> None:
    """Its copy, redelivered when RabbitMQ closes the worker's connections, finds the lease renewed."""
    hold = renewing.actors["hold"]
    lease_s = renewing.app.settings.store.step_lease_s
    run = renewing.app.start(step(hold, "long", LONG_STEPS_IN_LEASES * lease_s))
    renewing.workers.start()
    renewing.wait_until(
        lambda: renewing.ledger.count("hold", "executions").get("long", 0) == 1, "the long step started"
    )

    subprocess.run([*rabbitmqctl(), "-q", "close_all_connections", "recovery test"], check=True, capture_output=True)
    status = run.wait(LONG_STEPS_IN_LEASES * lease_s + 60)

    assert status.state == "succeeded"
    assert renewing.ledger.count("hold", "executions") == {"long": 1}
