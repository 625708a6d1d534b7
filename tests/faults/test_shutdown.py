"""SIGTERM under load: in-flight messages finish within the grace period, the rest go back to RabbitMQ.

Figures are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import time

from pipelines.broker import ExchangeBroker
from tests.support.faults.fault_scenario import Fault

ITEMS = 1500


def test_a_graceful_stop_finishes_what_runs_and_loses_or_repeats_nothing(fault: Fault) -> None:
    work = fault.actors["work"]
    assert isinstance(fault.app.broker, ExchangeBroker)
    fault.app.broker.enqueue_many([work.message(f"g{n}") for n in range(ITEMS)])
    fault.workers.start()
    fault.wait_until(lambda: len(fault.ledger.count("work", "effects")) >= ITEMS // 3, "progress")

    stopping = time.monotonic()
    status = fault.workers.terminate()
    stopped_s = time.monotonic() - stopping
    done_at_stop = len(fault.ledger.count("work", "effects"))
    in_queue = fault.app.broker.queue_depth(fault.app.broker.topology.actor_queues["work"])
    fault.workers.start()
    fault.wait_until(lambda: len(fault.ledger.count("work", "effects")) == ITEMS, "every item applied")

    executions = fault.ledger.count("work", "executions")
    repeated = sum(count - 1 for count in executions.values())
    print(
        f"\ngraceful stop under load: {ITEMS} items; stopped in {stopped_s:.2f} s (exit {status}) with "
        f"{done_at_stop} done and {in_queue} back in the queue; after a restart: {len(executions)} applied, "
        f"{repeated} executed twice"
    )
    assert status == 0
    assert done_at_stop + (in_queue or 0) == ITEMS  # nothing in flight was lost or left unacknowledged
    assert repeated == 0
    assert fault.app.dead_letters.list() == []


def test_work_still_running_after_the_grace_period_is_redelivered_not_lost(fault: Fault) -> None:
    slow = fault.actors["slow"]
    # Messages of 2.5 s, a grace period of 0.5 s: the stop cannot wait for them.
    fault.app.broker.enqueue_many([slow.message(f"s{n}", 2.5) for n in range(4)])
    fault.workers.start(threads=4, extra=("--worker-shutdown-timeout", "500"))
    fault.wait_until(lambda: len(fault.ledger.count("slow", "executions")) == 4, "every message started")

    status = fault.workers.terminate()
    fault.workers.start(threads=4)
    fault.wait_until(lambda: len(fault.ledger.count("slow", "effects")) == 4, "every message applied")

    executions = fault.ledger.count("slow", "executions")
    print(f"\ngrace 0.5 s, messages of 2.5 s: stop exit {status}; executions per message {sorted(executions.values())}")
    assert sorted(fault.ledger.values("slow")) == [f"s{n}" for n in range(4)]
    assert all(count == 2 for count in executions.values())  # cut off at the stop, run again after it
    assert fault.app.dead_letters.list() == []
