"""A long-running job's lease outlives it: no copy of a job that ended runs again, and a job that ends
normally is never reported as taken over."""

from __future__ import annotations

import logging
import threading
import time

import dramatiq
import pytest

from pipelines import step
from pipelines.middleware.leases import Leases
from tests.support.fixtures import MakeApp, Observe, StartWorker


class CountedStop(threading.Event):
    """The heartbeat's stop event, counting the heartbeat's waits (each followed by a renewal)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        stopped = super().wait(timeout)
        self.waits += 1
        return stopped


def test_a_job_that_ends_normally_is_never_reported_as_taken_over(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    observer = observe(app)

    @dramatiq.actor(broker=app.broker, profile="long_running", lease_s=1)
    def export(n: int) -> None:
        time.sleep(0.5)  # ends between two heartbeats (every third of the lease)

    stop = CountedStop()
    next(m for m in app.broker.middleware if isinstance(m, Leases))._stop = stop
    start_worker(app)
    caplog.set_level(logging.WARNING, logger="pipelines.middleware.leases")
    for n in range(3):
        export.send(n)
    runs = [app.start(step(export, n)) for n in range(3)]
    for run in runs:
        assert run.wait(timeout_s=30).state == "succeeded"
    observer.wait_handled("export", 6)
    # Two more heartbeats: a lease closed while the heartbeat waited would be reported by now.
    beats = stop.waits
    deadline = time.monotonic() + 10
    while stop.waits < beats + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stop.waits >= beats + 2

    assert [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()] == []


@pytest.mark.parametrize("fails", [False, True], ids=["finished", "failed-for-good"])
def test_a_copy_of_a_job_that_ended_does_not_run_it_again(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, fails: bool
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[str] = []

    @dramatiq.actor(broker=app.broker, profile="long_running", max_retries=0)
    def export(table: str) -> None:
        ran.append(table)
        if fails:
            raise RuntimeError("disk full")

    start_worker(app)
    message = export.send("orders")
    if fails:
        observer.wait_dead_lettered("export", 1)
    else:
        observer.wait_handled("export", 1)
    app.broker.enqueue(message)  # a duplicated publish, or a copy redelivered after the job ended
    observer.wait_handled("export", 2)

    assert ran == ["orders"]
    assert len(app.dead_letters.list()) == (1 if fails else 0)


def test_a_replayed_dead_letter_of_a_long_job_runs_again(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    attempts: list[str] = []

    @dramatiq.actor(broker=app.broker, profile="long_running", max_retries=0)
    def export(table: str) -> None:
        attempts.append(table)
        if len(attempts) == 1:
            raise RuntimeError("disk full")

    start_worker(app)
    export.send("orders")
    observer.wait_dead_lettered("export", 1)
    [letter] = app.dead_letters.list()
    app.dead_letters.replay(letter.id)
    observer.wait_handled("export", 2)

    assert attempts == ["orders", "orders"]
