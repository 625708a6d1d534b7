"""Queues that no worker reads, named in words: the first step of a run that does not start, and the
framework's own queue (`pipelines`) that workers started with other `--queues` leave out. The real
commands and a stock `dramatiq` worker on the real RabbitMQ and Redis."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.housekeeping import stop_process
from tests.test_cli import TIMEOUT_S, dramatiq_worker, environment, pipelines, pipelines_started

FRAMEWORK_NOTE = (
    "No worker reads Dramatiq queue 'pipelines', the framework's own actors: run deadlines are not enforced, "
    "lapsed leases are not re-driven and missed ticks are not counted."
)


def test_a_run_that_no_worker_starts_names_its_first_steps_queue_when_the_wait_ends(
    namespaces: Callable[[], str],
) -> None:
    env = environment(namespaces())  # no worker

    waited = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/w.jpg", "--timeout", "1")

    namespace = env["PIPELINES_NAMESPACE"]
    assert waited.returncode == 1
    assert waited.stderr.count("\n") == 1
    assert "is still pending after 1.0 s (0/5 steps done)." in waited.stderr
    assert f"No worker reads queue {namespace}.images.fetch_image of step 0.0 (fetch_image)" in waited.stderr


def test_a_worker_that_leaves_out_the_framework_queue_is_told_at_boot_and_queues_and_topology_say_so(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    env = environment(namespaces())
    log = tmp_path / "worker.log"
    worker = dramatiq_worker(env, log, threads=2, queues=("orders", "images"))
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "not 'pipelines', the queue of the framework's own actors" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)  # another process's log file: nothing to subscribe to
        queues = pipelines(env, "queues")
        topology = pipelines(env, "topology")
    finally:
        stop_process(worker, timeout_s=TIMEOUT_S)

    assert "This worker reads --queues images orders, not 'pipelines'" in log.read_text()
    assert queues.returncode == 0, queues.stderr
    assert FRAMEWORK_NOTE in queues.stdout
    assert topology.returncode == 0, topology.stderr
    assert FRAMEWORK_NOTE in topology.stdout


def test_a_wait_without_end_says_at_once_when_no_worker_reads_the_first_steps_queue(
    namespaces: Callable[[], str],
) -> None:
    env = environment(namespaces())  # no worker
    namespace = env["PIPELINES_NAMESPACE"]
    run = ("run", "thumbnails", "--arg", "url=https://example.com/v.jpg", "--wait")
    waiting = pipelines_started(env, *run, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert waiting.stderr is not None
        line = waiting.stderr.readline()  # the process waits for ever: the line comes first, or never
    finally:
        stop_process(waiting)

    assert line.startswith("pipelines: waiting for run ")
    assert f"No worker reads queue {namespace}.images.fetch_image of step 0.0 (fetch_image)" in line
