"""Long-running jobs: progress in the run record, cooperative cancel, leases and their watchdog."""

from __future__ import annotations

import threading
import time
from typing import Any

import dramatiq
import orjson
import pytest

from pipelines import report_progress, step
from pipelines.app import App
from pipelines.middleware.leases import WATCHDOG, lease_id_of
from pipelines.wire.codec import encode_message
from tests.support.backends import only_on
from tests.support.broker_witness import wait_until_empty
from tests.support.fixtures import MakeApp, Observe, StartWorker

rabbitmq_only = only_on("rabbitmq")


def test_progress_shows_in_the_run_and_a_cancel_stops_the_job_at_its_next_report(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    reports: list[int] = []
    go_on = threading.Event()

    @dramatiq.actor(broker=app.broker, profile="long_running", lease_s=5)
    def transcode(video: str) -> None:
        for n in range(1000):
            report_progress(n / 1000, f"{n}/1000 segments")
            reports.append(n)
            go_on.wait(0.01)

    worker = start_worker(app)
    run = app.start(step(transcode, "cat.mp4"))
    progress: list[Any] = []

    def on_change(status: Any) -> None:
        progress.append(status.steps[0].progress)
        if status.steps[0].progress and status.steps[0].progress > 0 and run.status().state == "running":
            run.cancel()

    status = run.wait(timeout_s=30, on_change=on_change)
    observer.wait_handled("transcode", 1)

    assert status.state == "cancelled"
    assert any(p and p > 0 for p in progress)
    assert status.steps[0].progress_text
    assert status.steps[0].progress_text.endswith("/1000 segments")
    assert len(reports) < 1000  # it stopped early
    assert observer.handled == {"transcode": 1}  # not retried
    assert app.dead_letters.list() == []
    worker.join()  # every hook of the stopped job has run
    assert run.status().steps[0].state == "skipped"  # not left "running"


def lapse(app: App, message: dramatiq.Message[Any]) -> None:
    """What a worker that took ``message`` and died leaves: the job's lease, open and not renewed, and the
    job's watchdog, due. (A worker killed for real: tests/faults/test_profiles_faults.py.)"""
    lease_id = lease_id_of(dramatiq.broker.MessageProxy(message))
    record = orjson.dumps({"message": encode_message(message).decode()}).decode()
    assert app.store.open_lease(lease_id, holder="dead-worker", lease_ms=-1, record=record)
    app.broker.enqueue(app.broker.get_actor(WATCHDOG).message(lease_id))


def test_a_job_whose_lease_lapsed_is_run_again_by_its_watchdog(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[str] = []

    @dramatiq.actor(broker=app.broker, profile="long_running", lease_s=1, max_retries=2)
    def export(table: str) -> str:
        ran.append(table)
        return f"{table}.csv"

    start_worker(app)
    run = app.start(step(export, "orders"))
    run.wait(timeout_s=10)
    message = export.message("users")
    lapse(app, message)
    observer.wait_handled("export", 2)

    assert ran == ["orders", "users"]
    assert app.store.take_expired_lease(lease_id_of(dramatiq.broker.MessageProxy(message))).kind == "gone"


def test_a_job_with_on_lost_fail_whose_lease_lapsed_is_dead_lettered_by_its_watchdog_and_fails_its_run(
    make_app: MakeApp, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    ran: list[str] = []

    @dramatiq.actor(broker=app.broker, profile="long_running", on_lost="fail", max_retries=2)  # retries left
    def backup(volume: str) -> None:
        ran.append(volume)

    # The run's step, taken before any worker sees it, by a worker that then died.
    taken: list[dramatiq.Message[Any]] = []

    def take(messages: list[dramatiq.Message[Any]], **_: Any) -> list[dramatiq.Message[Any]]:
        taken.extend(messages)
        return messages

    with monkeypatch.context() as patch:
        patch.setattr(app.broker, "enqueue_many", take)
        run = app.start(step(backup, "vol-1"))
    [message] = taken
    lapse(app, message)
    start_worker(app)
    status = run.wait(timeout_s=30)

    [letter] = app.dead_letters.list()
    reason = letter.reason
    assert (reason.reason, reason.error_type, reason.run_id) == ("worker lost", "WorkerLost", run.id)
    assert (status.state, status.failed_step) == ("failed", "0.0")
    assert "stopped renewing its lease" in (status.error or "")
    assert ran == []  # not run again


@rabbitmq_only
def test_a_job_longer_than_the_consumer_timeout_runs_once(
    short_consumer_timeout: int, make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app(broker={"consumer_timeout_s": 2})
    observer = observe(app)
    runs: list[float] = []
    job_s = 3 * short_consumer_timeout / 1000

    @dramatiq.actor(broker=app.broker, profile="long_running", lease_s=2, timeout_s=60)
    def render(scene: str) -> str:
        runs.append(time.time())
        deadline = time.monotonic() + job_s
        while time.monotonic() < deadline:
            report_progress(min(1.0, 1 - (deadline - time.monotonic()) / job_s), scene)
            time.sleep(0.2)
        return scene

    start_worker(app)
    run = app.start(step(render, "intro"))
    status = run.wait(timeout_s=60)
    # RabbitMQ holds nothing of the job: a delivery of it still unacknowledged, or ready again, would be
    # delivered (again) after the job.
    wait_until_empty(app.settings.broker.url, app.settings.namespace, [app.broker.topology.actor_queues["render"]])

    print(f"\njob of {job_s:.0f} s with consumer timeout {short_consumer_timeout} ms: {len(runs)} run(s)")
    assert status.state == "succeeded"
    assert len(runs) == 1
    assert observer.handled.get("render") == 1
