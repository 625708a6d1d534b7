"""What renewing the leases of the steps a worker holds costs: Redis commands and heartbeat CPU per step.

A worker process holds every step it runs by a lease (``[store] step_lease_s``, 20 s) that one heartbeat
thread renews each quarter of it: every step the process holds, in one round trip
(``pipelines.handling.holds``). A step that ends within a quarter lease may never be renewed; a longer
one is renewed once per quarter lease it runs. So the cost is counted per held step and renewal.

This case claims the first steps of ``steps`` runs in the run store, as workers' threads claim them,
holds them all in one process's ``Holds`` with the shipped lease, and lets its heartbeat renew them
``renewals`` times. It counts what reached Redis through ``MONITOR`` (the ``step_renew`` script calls
and the commands they ran: :class:`bench.census.Census`, kept open across the pauses between
renewals) and reads the heartbeat thread's own CPU clock.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from bench.census import Census
from bench.systems import Ours
from pipelines.handling.holds import Holds
from pipelines.store import NewRun

#: The name of the thread that renews a process's holds.
HEARTBEAT = "pipelines-holds-heartbeat"
#: Runs created per store call.
BATCH = 500


def claimed_steps(store: Any, steps: int, lease_ms: int) -> dict[tuple[str, str], int]:
    """Claim the first step of ``steps`` new one-step runs; each step's claim count by (run, step)."""
    runs = [
        NewRun(run_id=uuid.uuid4().hex, pipeline="held", steps=[("0", "held")], starts={}, entries={})
        for _ in range(steps)
    ]
    for first in range(0, steps, BATCH):
        store.create_runs(runs[first : first + BATCH])
    return {(run.run_id, "0"): store.claim_step(run.run_id, "0", attempt=1, lease_ms=lease_ms).attempt for run in runs}


def renewals(system: Ours, steps: int, renewals: int) -> dict[str, float]:
    """Per held step and renewal: round trips, Redis commands (``step_renew`` calls and the commands
    inside them) and the heartbeat thread's CPU in microseconds; and how many holds were lost (none)."""
    store = system.app.store
    lease_s = system.app.settings.store.step_lease_s
    claims = claimed_steps(store, steps, int(lease_s * 1000))
    holds = Holds(store=store, lease_s=lease_s)
    with Census(silence_s=2 * holds.interval_s) as census:  # renewals come each interval
        held = [holds.step(run_id, node, claim) for (run_id, node), claim in claims.items()]
        heartbeat = next(thread for thread in threading.enumerate() if thread.name == HEARTBEAT)
        assert heartbeat.ident is not None
        clock = time.pthread_getcpuclockid(heartbeat.ident)
        cpu_before = time.clock_gettime_ns(clock)
        while holds.renewals < renewals:
            time.sleep(0.05)
        time.sleep(holds.interval_s / 4)  # the last renewal's own bookkeeping, well before the next one
        cpu_ns = time.clock_gettime_ns(clock) - cpu_before
        for hold in held:  # before the next renewal: nothing more to renew
            holds.release(hold)
        census.settle()
    done = steps * holds.renewals
    return {
        "steps_held": steps,
        "renewals": holds.renewals,
        "lease_s": lease_s,
        "round_trips_per_step_renewal": holds.renewals / done,
        "redis_commands_per_step_renewal": (sum(census.calls.values()) + sum(census.inner.values())) / done,
        **{f"{name}_calls_per_step_renewal": count / done for name, count in census.calls.items()},
        **{f"{name}_{command}_per_step_renewal": count / done for (name, command), count in census.inner.items()},
        "heartbeat_cpu_us_per_step_renewal": cpu_ns / 1000 / done,
        "lost": sum(hold.lost.is_set() for hold in held),
    }
