"""Metrics in one process: what the middleware count, and what the scheduler serves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import dramatiq
import pytest
from periodiq import cron
from prometheus_client import CollectorRegistry

from pipelines import chain, chord, for_each
from pipelines.app import App
from pipelines.config.sections import MetricsConfig
from pipelines.middleware import Metrics
from tests.support.backends import AMQP_URL, REDIS_URL
from tests.support.fixtures import MakeApp, Observe, StartWorker
from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

TIMEOUT_S = 30
BIN = Path(sys.executable).parent


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


@pytest.fixture
def counted(make_app: MakeApp) -> tuple[App, CollectorRegistry]:
    app = make_app(metrics={"enabled": True, "multiprocess": False})
    metrics = next(m for m in app.broker.middleware if isinstance(m, Metrics))
    metrics._setup()
    return app, metrics.registry


def test_processing_retries_dead_letters_duplicates_and_runs_are_counted(
    counted: tuple[App, CollectorRegistry], start_worker: StartWorker, observe: Observe
) -> None:
    app, registry = counted
    observer = observe(app)
    attempts: list[int] = []

    @dramatiq.actor(broker=app.broker)
    def square(x: int) -> int:
        return x * x

    @dramatiq.actor(broker=app.broker)
    def total(xs: list[int]) -> int:
        return sum(xs)

    @dramatiq.actor(broker=app.broker, max_retries=1, min_backoff=1, max_backoff=5)
    def broken(x: int) -> None:
        attempts.append(x)
        raise ValueError(x)

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda x: f"once-{x}")
    def once(x: int) -> None:
        pass

    start_worker(app)
    assert app.start(chord(for_each(square, range(3)), then=total)).result(timeout_s=TIMEOUT_S) == 5
    assert app.start(chain(broken), args=(1,)).wait(TIMEOUT_S).state == "failed"
    once.send(1)
    observer.wait_handled("once", 1)
    once.send(1)
    observer.wait_handled("once", 2)
    observer.wait_dead_lettered("broken", 1)
    # A result is recorded before the last middleware count it: await the worker's hooks, not the result.
    observer.wait_handled("square", 3)
    observer.wait_handled("total", 1)
    observer.wait_handled("broken", 2)

    assert value(registry, "pipelines_messages_processed_total", queue="default", actor="square") == 3
    assert value(registry, "pipelines_messages_failed_total", queue="default", actor="broken") == 2
    assert value(registry, "pipelines_messages_retried_total", queue="default", actor="broken") == 1
    assert value(registry, "pipelines_messages_dead_lettered_total", queue="default", actor="broken") == 1
    assert value(registry, "pipelines_messages_duplicates_skipped_total", queue="default", actor="once") == 1
    assert value(registry, "pipelines_message_duration_seconds_count", queue="default", actor="square") == 3
    assert value(registry, "pipelines_messages_in_flight", queue="default", actor="square") == 0
    assert value(registry, "pipelines_runs_total", pipeline="square>total", outcome="succeeded") == 1
    assert value(registry, "pipelines_runs_total", pipeline="broken", outcome="failed") == 1
    assert value(registry, "pipelines_chord_wait_seconds_count", pipeline="square>total") == 1


def test_drops_and_partition_lag_are_counted(
    counted: tuple[App, CollectorRegistry], start_worker: StartWorker, observe: Observe
) -> None:
    app, registry = counted
    observer = observe(app)

    @dramatiq.actor(broker=app.broker, profile="fire_and_forget", max_retries=0)
    def ping(n: int) -> None:
        raise ConnectionError(n)

    @dramatiq.actor(broker=app.broker, profile="ordered", ordering_key="user", partitions=2)
    def feed(user: str) -> None: ...

    start_worker(app)
    sent_ping = ping.send(1)
    sent = [feed.send(user) for user in ("ada", "bob", "cy")]
    observer.wait_handled("feed", 3)
    observer.wait_dead_lettered("ping", 1)

    partitions = [str(m.options["partition"]) for m in sent]
    ping_queue = app.broker.topology.actor_queues["ping"]
    head = value(registry, "pipelines_queue_head_published_timestamp_seconds", queue=ping_queue)
    assert head == pytest.approx(sent_ping.message_timestamp / 1000)
    assert value(registry, "pipelines_messages_dropped_total", queue="default", actor="ping") == 1
    assert value(registry, "pipelines_messages_dead_lettered_total", queue="default", actor="ping") == 0
    for partition in set(partitions):
        count = value(registry, "pipelines_partition_lag_seconds_count", actor="feed", partition=partition)
        assert count == partitions.count(partition)


def test_hops_are_counted_by_actor_as_run_where_the_step_before_finished_or_published(
    counted: tuple[App, CollectorRegistry], start_worker: StartWorker
) -> None:
    app, registry = counted

    @dramatiq.actor(broker=app.broker)
    def first(x: int) -> int:
        return x

    @dramatiq.actor(broker=app.broker)
    def local_next(x: int) -> int:
        return x

    @dramatiq.actor(broker=app.broker, local_steps=False)
    def routed_next(x: int) -> int:
        return x

    start_worker(app)
    assert app.start(chain(first, local_next, routed_next), args=(1,)).result(timeout_s=30) == 1

    assert value(registry, "pipelines_step_hops_total", actor="local_next", hop="local") == 1
    assert value(registry, "pipelines_step_hops_total", actor="routed_next", hop="routed") == 1
    assert value(registry, "pipelines_step_hops_total", actor="first", hop="local") == 0  # the first: no hop


def test_a_local_step_leaves_its_queues_head_at_the_last_delivery_started_from_it(
    counted: tuple[App, CollectorRegistry], start_worker: StartWorker
) -> None:
    """The oldest message's age is bounded by when the last delivery started from the queue was published:
    a local step, made when the step before it ended, was never in its queue and must not move it."""
    app, registry = counted

    @dramatiq.actor(broker=app.broker)
    def first_here(x: int) -> int:
        return x

    @dramatiq.actor(broker=app.broker)
    def then_here(x: int) -> int:
        return x

    start_worker(app)
    before = time.time()
    run = app.start(chain(first_here, then_here), args=(1,))
    published_by = time.time()
    assert run.result(timeout_s=30) == 1
    assert value(registry, "pipelines_step_hops_total", actor="then_here", hop="local") == 1
    queues = app.broker.topology.actor_queues
    first_head = value(registry, "pipelines_queue_head_published_timestamp_seconds", queue=queues["first_here"])
    assert before - 0.001 <= first_head <= published_by + 0.001
    assert value(registry, "pipelines_queue_head_published_timestamp_seconds", queue=queues["then_here"]) == 0


def test_the_scheduler_serves_when_each_job_last_ticked_and_its_interval(make_app: MakeApp) -> None:
    port = free_port()
    app = make_app(metrics={"enabled": True, "multiprocess": False, "port": port})

    @dramatiq.actor(broker=app.broker, periodic=cron("*/5 * * * *"))
    def every_five_minutes() -> None:
        pass

    # What periodiq's scheduler does on a tick:
    every_five_minutes.send_with_options(scheduled_at="2026-11-30T12:00:00+00:00")

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    namespace = app.settings.namespace
    assert (
        f'pipelines_schedule_last_tick_timestamp_seconds{{actor="every_five_minutes",pipelines_namespace="{namespace}"}}'
        in text
    )
    assert (
        f'pipelines_schedule_interval_seconds{{actor="every_five_minutes",pipelines_namespace="{namespace}"}} 300.0'
        in text
    )


def test_each_dramatiq_command_gets_its_own_directory_and_removes_those_of_exited_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pipelines.observability.metrics_dir import GROUP_MARKER, group_dir, metrics_root, open_group

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert metrics_root(MetricsConfig()).name == "pipelines-metrics"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics_root(MetricsConfig()) == tmp_path
    exited = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    gone = group_dir(MetricsConfig(), "prod", int(exited.stdout))
    gone.mkdir()
    (gone / GROUP_MARKER).touch()
    (tmp_path / "unrelated").mkdir()
    live = group_dir(MetricsConfig(), "prod", os.getpid())

    assert live.parent == tmp_path
    assert live.name.startswith(f"prod-{os.getpid()}-")
    assert open_group(live)  # the group's first process
    assert not open_group(live)  # its others
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted([live.name, "unrelated"])
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(live))  # as a worker process sets it
    assert metrics_root(MetricsConfig()) == tmp_path


#: A scheduled job's module for `pipelines scheduler` (PYTHONPATH names its folder).
SCHEDULED = """
import dramatiq
from periodiq import cron
from pipelines.app import configure

app = configure()
broker = app.broker
dramatiq.actor(actor_name="minutely", broker=broker, periodic=cron("* * * * *"))(lambda: None)
"""


def test_a_scheduler_whose_metrics_folder_does_not_exist_yet_creates_it_and_serves(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    (tmp_path / "scheduled.py").write_text(SCHEDULED)
    folder = tmp_path / "not-yet" / "metrics"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespaces(),
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_STORE__URL": REDIS_URL,
        "PIPELINES_METRICS__ENABLED": "true",
        "PIPELINES_METRICS__PORT": str(port),
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
        "PYTHONPATH": str(tmp_path),
    }
    log_path = tmp_path / "scheduler.log"
    with log_path.open("ab") as log:
        scheduler = start_process([str(BIN / "pipelines"), "scheduler", "scheduled"], env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (status := healthz(port)) is None and scheduler.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # another process's port: nothing to subscribe to
    finally:
        stop_process(scheduler, timeout_s=TIMEOUT_S)

    text = log_path.read_text()
    assert status == 200, text[-2000:]
    assert folder.is_dir()
    assert "Traceback" not in text


def healthz(port: int) -> int | None:
    """The status of the scheduler's /healthz (None while nothing answers on ``port``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status)
    except OSError:
        return None
