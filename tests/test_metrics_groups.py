"""Metrics per `dramatiq` command: what one worker serves is its own processes' and its namespace's only.

Stock `dramatiq actors` workers on the real RabbitMQ and Redis, scraped as Prometheus does: an app
embedded in the test process, a worker of another namespace and an earlier worker sharing the same
multiprocess root add nothing; a taken metrics port stops the worker at boot with one line.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pipelines.cli.top import scrape_counts
from pipelines.testing import embedded_app
from tests.support.ports import free_port
from tests.test_observability_processes import TIMEOUT_S, Worker, environment, pipelines, wait_for_scrape

CHARGE = (("actor", "charge_payment"), ("queue", "orders"))


def metrics_env(namespace: str, port: int, root: Path) -> dict[str, str]:
    return environment(
        namespace,
        PIPELINES_METRICS__ENABLED="true",
        PIPELINES_METRICS__PORT=str(port),
        PIPELINES_METRICS__MULTIPROCESS_DIR=str(root),
        PIPELINES_METRICS__QUEUE_SAMPLE_INTERVAL_S="0.5",
        PIPELINES_METRICS__HEARTBEAT_INTERVAL_S="0.5",
    )


EMBEDDED = """
import sys, threading
import dramatiq
from pipelines.testing import embedded_app, running_worker

namespace, root, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = threading.Semaphore(0)
with embedded_app(namespace, metrics={"enabled": True, "multiprocess_dir": root}) as app:
    @dramatiq.actor(broker=app.broker)
    def ping() -> None:
        done.release()

    with running_worker(app):
        for _ in range(count):
            ping.send()
        assert all(done.acquire(timeout=60) for _ in range(count))
"""


def process_pings_embedded(namespace: str, root: Path, count: int) -> None:
    """What a user's own test run does, in a fresh interpreter: an embedded app with metrics on."""
    subprocess.run(
        [sys.executable, "-c", EMBEDDED, namespace, str(root), str(count)],
        env=environment(namespace),
        check=True,
        timeout=TIMEOUT_S,
    )


def heartbeat_pids(port: int) -> set[str]:
    """The processes whose heartbeat series a worker serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        sample.labels["pid"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "pipelines_worker_heartbeat_timestamp_seconds"
    }


def test_a_worker_serves_only_its_own_processes_and_namespace(namespaces: Callable[[], str], tmp_path: Path) -> None:
    root = tmp_path / "samples"
    mine, other = namespaces(), namespaces()
    process_pings_embedded(mine, root, 20)
    env, other_env = metrics_env(mine, free_port(), root), metrics_env(other, free_port(), root)
    worker = Worker(env, tmp_path / "worker.log")
    other_worker = Worker(other_env, tmp_path / "other.log", processes=1)
    try:
        for order_id in range(2):
            ok = pipelines(
                env, "run", "order_fulfilment", "--arg", f"order_id={order_id}", "--arg", "total=5", "--wait"
            )
            assert ok.returncode == 0, ok.stdout + ok.stderr
        port, other_port = int(env["PIPELINES_METRICS__PORT"]), int(other_env["PIPELINES_METRICS__PORT"])
        served = wait_for_scrape(port, lambda m: m.get("pipelines_workers", {}).get((), 0) == 2, worker.log)
        other_served = wait_for_scrape(
            other_port, lambda m: m.get("pipelines_workers", {}).get((), 0) == 1, other_worker.log
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            health = (response.status, response.read().decode())
        with embedded_app(mine, metrics={"enabled": True, "port": port}) as app:
            top_mine = scrape_counts(app)
        with embedded_app(other, metrics={"enabled": True, "port": port}) as app:
            top_other = scrape_counts(app)
    finally:
        worker.stop()
        other_worker.stop()

    processed = served["pipelines_messages_processed_total"]
    assert processed[CHARGE] == 2
    assert not [labels for labels in processed if ("actor", "ping") in labels]  # the embedded app's 20
    assert sum(processed.values()) == 2 * 5  # five steps a run, nothing else
    assert set(served["namespaces"]) == {(("namespace", mine),)}
    assert set(other_served["namespaces"]) == {(("namespace", other),)}
    assert not sum(other_served.get("pipelines_messages_processed_total", {}).values())
    assert health == (200, "ok\n")
    assert top_mine is not None
    assert top_mine["pipelines_messages_processed_total"]["charge_payment"] == 2
    assert top_other == {}  # `pipelines top` of another app reading this port shows none of its rates


def test_a_restarted_worker_serves_no_series_of_the_processes_before_it(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    root = tmp_path / "samples"
    env = metrics_env(namespaces(), free_port(), root)
    port = int(env["PIPELINES_METRICS__PORT"])
    pids = []
    for attempt in range(2):
        worker = Worker(env, tmp_path / f"worker-{attempt}.log")
        try:
            wait_for_scrape(port, lambda m: m.get("pipelines_workers", {}).get((), 0) == 2, worker.log)
            pids.append(heartbeat_pids(port))
        finally:
            worker.stop()

    assert [len(p) for p in pids] == [2, 2]
    assert not pids[0] & pids[1]  # the second worker serves its own two processes, none of the first's
    assert len([group for group in root.iterdir() if group.is_dir()]) == 1  # the first's directory is gone


def test_a_taken_metrics_port_stops_the_worker_at_boot_with_one_line(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = metrics_env(namespaces(), taken.getsockname()[1], tmp_path / "samples")
        worker = Worker(env, tmp_path / "worker.log")
        try:
            code = worker.process.wait(timeout=TIMEOUT_S)
        finally:
            worker.stop()

    log = worker.log.read_text()
    assert code == 78, log
    assert "Traceback" not in log
    [line] = [line for line in log.splitlines() if "Metrics port" in line]
    assert "PIPELINES_METRICS__PORT" in line
