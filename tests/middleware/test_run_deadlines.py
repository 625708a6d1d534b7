"""A run past its deadline is failed when the deadline passes, naming the step that was running, and
that step sees its next cancel check raise."""

from __future__ import annotations

import threading

import dramatiq

from pipelines import check_cancelled, step
from pipelines.errors import Cancelled
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


def test_a_run_whose_only_step_runs_past_its_deadline_fails_then_and_the_step_stops(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    stopped: list[str] = []
    release = threading.Event()

    @dramatiq.actor(broker=app.broker)
    def crunch(rows: int) -> None:
        for _ in range(rows):
            try:
                check_cancelled()
            except Cancelled as e:
                stopped.append(str(e))
                raise
            release.wait(0.05)

    start_worker(app)
    run = app.start(step(crunch, 100_000), deadline_s=0.5)  # 100,000 rows would take over an hour
    status = run.wait(TIMEOUT_S)  # ends when the deadline passes, not when the step would
    observer.wait_handled("crunch", 1)

    assert (status.state, status.error) == ("failed", "deadline exceeded")
    assert status.failed_step == status.steps[0].node
    assert status.steps[0].state == "failed"
    assert len(stopped) == 1
    assert "failed" in stopped[0]
    assert app.dead_letters.list() == []  # stopped, neither retried nor dead-lettered
    assert observer.handled["crunch"] == 1
