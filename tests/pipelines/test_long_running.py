"""Long-running jobs: progress in the run record, cooperative cancel, leases and their watchdog."""

from __future__ import annotations

import threading
import time
from typing import Any

import dramatiq
import orjson

from pipelines import report_progress, step
from pipelines.broker import MemoryBroker
from pipelines.codec import encode_message
from pipelines.middleware.leases import WATCHDOG, Leases
from tests.backends import only_on
from tests.broker_witness import wait_until_empty
from tests.fixtures import MakeApp, Observe, StartWorker

memory_only = only_on("memory")
rabbitmq_only = only_on("rabbitmq")


def leases_of(app: Any) -> Leases:
    return next(m for m in app.broker.middleware if isinstance(m, Leases))


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


def test_a_job_whose_worker_died_is_run_again_by_its_watchdog(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int] = []

    @dramatiq.actor(broker=app.broker, profile="long_running", lease_s=1, max_retries=2)
    def export(table: str) -> str:
        ran.append(1)
        return f"{table}.csv"

    start_worker(app)
    run = app.start(step(export, "orders"))
    run.wait(timeout_s=10)
    # A worker that died mid-job leaves a lease nobody renews; its watchdog finds it lapsed.
    message = export.message("users")
    record = orjson.dumps({"message": encode_message(message).decode()}).decode()
    assert app.store.open_lease("lost-1", holder="dead-worker", lease_ms=-1, record=record)
    app.broker.enqueue(app.broker.get_actor(WATCHDOG).message("lost-1"))
    observer.wait_handled("export", 2)

    assert len(ran) == 2
    assert app.store.take_expired_lease("lost-1").kind == "gone"


@memory_only
def test_a_lost_job_with_on_lost_fail_is_dead_lettered_and_fails_its_run(make_app: MakeApp) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker, profile="long_running", on_lost="fail")
    def backup(volume: str) -> None: ...

    run = app.start(step(backup, "vol-1"))
    assert isinstance(app.broker, MemoryBroker)
    [published] = [dramatiq.Message.decode(body) for body in app.broker.queues["long_running"].queue]
    leases_of(app).recover(app.broker, published)

    [letter] = app.dead_letters.list()
    assert (letter.reason.reason, letter.reason.error_type, letter.reason.run_id) == (
        "worker lost",
        "WorkerLost",
        run.id,
    )
    status = run.status()
    assert (status.state, status.failed_step) == ("failed", "0.0")
    assert status.error
    assert "stopped renewing its lease" in status.error


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
