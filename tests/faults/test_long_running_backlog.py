"""A backlog of long-running jobs on a node whose consumer timeout is shorter than a job.

The node is the test's own (``own_rabbit``): consumer timeout CONSUMER_TIMEOUT_S, checked every second.
A delivery a worker held unacknowledged behind a busy thread for longer would have its channel closed
by the node and come back, and the copy held would run as well.

The sizes are kept small for the suite (about 20 s for the backlog, 15 s for the shutdown, 30 s for the
node's boot); the environment sets others, for a run by hand at full size (a 10 s timeout, 20 s jobs: about 4 min):

    BACKLOG_CONSUMER_TIMEOUT_S=10 BACKLOG_JOB_S=20 BACKLOG_JOBS=6 \
        .venv/bin/pytest -s tests/faults/test_long_running_backlog.py

- ``BACKLOG_CONSUMER_TIMEOUT_S``: the node's ``consumer_timeout`` and ``broker.consumer_timeout_s`` (4).
- ``BACKLOG_JOB_S``: how long each job runs, longer than the timeout and its check (6).
- ``BACKLOG_JOBS``: jobs sent as plain messages, and as many sent as runs (3: six jobs for two threads,
  so four wait behind a running job, the last two behind two, 12 s, three times the timeout).

Each test prints its figures (``-s`` shows them): starts per job, channels the node closed for a late
acknowledgement (its log), consumer errors and lost leases (the workers' log), and the queue's
(ready, unacknowledged) counts sampled while a worker shuts down.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from pipelines import step
from pipelines.app import App, build_app
from pipelines.broker.rabbitmq import ExchangeBroker
from pipelines.config.settings import Settings
from tests.support.housekeeping import fresh_namespace, start_process, stop_process

ROOT = Path(__file__).resolve().parents[2]

from tests.support.faults.backlog_worker import declare  # noqa: E402
from tests.support.faults.own_rabbit import OwnRabbit  # noqa: E402

REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CONSUMER_TIMEOUT_S = int(os.environ.get("BACKLOG_CONSUMER_TIMEOUT_S", "4"))
#: Longer than the consumer timeout and its check: a delivery held behind a job would time out.
JOB_S = float(os.environ.get("BACKLOG_JOB_S", "6"))
JOBS = int(os.environ.get("BACKLOG_JOBS", "3"))
#: Two worker processes of one thread each run the 2 * JOBS jobs in about JOBS * JOB_S.
SETTLE_TIMEOUT_S = 150 + 3 * JOBS * JOB_S
#: What the node logs when it closes a channel for a delivery left unacknowledged too long.
ACK_TIMEOUT = re.compile(r"delivery acknowledgement on channel \d+ timed out")


@pytest.fixture(scope="module")
def own_rabbit() -> Iterator[OwnRabbit]:
    if os.geteuid() != 0:
        pytest.fail("this test starts its own RabbitMQ node as the rabbitmq user: run it as root", pytrace=False)
    node = OwnRabbit(consumer_timeout_ms=CONSUMER_TIMEOUT_S * 1000)
    try:
        node.start()
        yield node
    finally:
        node.close()


class Backlog:
    """One scenario: a namespace on the node, the producer app, the job, its ledger and the workers."""

    def __init__(self, node: OwnRabbit, log: Path) -> None:
        self.node = node
        self.namespace = fresh_namespace()
        values: dict[str, Any] = {
            "namespace": self.namespace,
            "broker": {"url": node.url, "consumer_timeout_s": CONSUMER_TIMEOUT_S},
            "store": {"url": REDIS_URL},
            "logging": {"format": "text", "level": "WARNING"},
        }
        self.app: App = build_app(Settings.from_values(values))
        self.export = declare(self.app.broker, self.namespace)
        self.ledger: Any = redis.Redis.from_url(REDIS_URL)
        self.log = log
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
            "PIPELINES_NAMESPACE": self.namespace,
            "PIPELINES_BROKER__URL": node.url,
            "PIPELINES_BROKER__CONSUMER_TIMEOUT_S": str(CONSUMER_TIMEOUT_S),
            "PIPELINES_STORE__URL": REDIS_URL,
            "PIPELINES_LOGGING__FORMAT": "text",
            "PIPELINES_LOGGING__LEVEL": "WARNING",
            "BACKLOG_LEDGER_URL": REDIS_URL,
        }
        self.workers: list[subprocess.Popen[bytes]] = []

    def worker(self, *, queue: str, processes: int, threads: int) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            process = start_process(
                [
                    *(
                        str(Path(sys.executable).parent / "dramatiq"),
                        "tests.support.faults.backlog_worker",
                        "--path",
                        str(ROOT),
                    ),
                    *("--queues", queue, "--processes", str(processes), "--threads", str(threads)),
                ],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
        self.workers.append(process)
        return process

    def counts(self, what: str) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.ledger.hgetall(f"{self.namespace}:ledger:{what}").items()}

    def wait_until(self, done: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"timed out waiting for {what}; worker log tail:\n{tail}")
            time.sleep(0.2)

    def queue_counts(self) -> tuple[int, int]:
        """(ready, unacknowledged) messages of the job's queue."""
        queue = self.app.broker.topology.actor_queues["export"]
        for line in self.node.ctl("list_queues", "name", "messages_ready", "messages_unacknowledged").splitlines():
            fields = line.split("\t")
            if fields[0] == queue:
                return int(fields[1]), int(fields[2])
        raise AssertionError(f"queue {queue} not found")

    def figures(self) -> dict[str, Any]:
        """What the test reports: starts per job, channels closed by the node, leases reported lost."""
        worker_log = self.log.read_text(errors="replace")
        return {
            "starts": self.counts("starts"),
            "channel_closures_node_log": len(ACK_TIMEOUT.findall(self.node.log())),
            "consumer_errors_worker_log": worker_log.count("Consumer encountered a connection error"),
            "lease_lost_errors": worker_log.count("was taken over"),
        }

    def close(self) -> None:
        for process in self.workers:  # the test is over: nothing waits for their graceful stop
            stop_process(process, timeout_s=0)
        for key in self.ledger.scan_iter(match=f"{self.namespace}:*"):
            self.ledger.delete(key)
        broker = self.app.broker
        assert isinstance(broker, ExchangeBroker)
        broker.delete_topology()
        self.app.close()


@pytest.fixture
def backlog(own_rabbit: OwnRabbit, services: None, tmp_path: Path) -> Iterator[Backlog]:
    scenario = Backlog(own_rabbit, tmp_path / "worker.log")
    try:
        yield scenario
    finally:
        scenario.close()


@pytest.mark.timeout(SETTLE_TIMEOUT_S + 120)
def test_a_backlog_of_long_jobs_starts_each_once_and_no_channel_is_closed(backlog: Backlog) -> None:
    closures_before = len(ACK_TIMEOUT.findall(backlog.node.log()))
    for n in range(JOBS):
        backlog.export.send(f"message-{n}", JOB_S)
    runs = [backlog.app.start(step(backlog.export, f"run-{n}", JOB_S)) for n in range(JOBS)]
    backlog.worker(queue="pipelines", processes=1, threads=2)  # the leases' watchdog
    backlog.worker(queue="long_running", processes=2, threads=1)

    backlog.wait_until(lambda: len(backlog.counts("ends")) == 2 * JOBS, "every job to end")
    for run in runs:
        run.wait(timeout_s=30)
    # Nothing held or waiting: a copy that came back would be in the queue or running now.
    backlog.wait_until(lambda: backlog.queue_counts() == (0, 0), "the job's queue to be empty")

    figures = backlog.figures()
    figures["channel_closures_node_log"] -= closures_before
    print(f"\n{JOBS} plain + {JOBS} run jobs of {JOB_S:g} s, consumer timeout {CONSUMER_TIMEOUT_S} s: {figures}")
    assert figures["starts"] == {f"{kind}-{n}": 1 for kind in ("message", "run") for n in range(JOBS)}
    assert figures["channel_closures_node_log"] == 0
    assert figures["consumer_errors_worker_log"] == 0
    assert figures["lease_lost_errors"] == 0
    assert all(run.status().state == "succeeded" for run in runs)


@pytest.mark.timeout(SETTLE_TIMEOUT_S + 120)
def test_on_sigterm_a_long_running_worker_holds_nothing_unacknowledged(backlog: Backlog) -> None:
    closures_before = len(ACK_TIMEOUT.findall(backlog.node.log()))
    for n in range(3):
        backlog.export.send(f"message-{n}", JOB_S)
    backlog.worker(queue="pipelines", processes=1, threads=2)
    worker = backlog.worker(queue="long_running", processes=1, threads=1)
    backlog.wait_until(lambda: len(backlog.counts("starts")) == 1, "the first job to start")

    worker.send_signal(signal.SIGTERM)
    samples: list[tuple[int, int]] = []

    def sampled_until_exit() -> bool:
        samples.append(backlog.queue_counts())
        return worker.poll() is not None

    backlog.wait_until(sampled_until_exit, "the worker to finish its job and exit")

    print(f"\n(ready, unacknowledged) while the worker shut down: {samples}; figures {backlog.figures()}")
    assert worker.returncode == 0
    assert all(unacknowledged == 0 for _, unacknowledged in samples), samples
    assert backlog.counts("ends") == backlog.counts("starts") == {"message-0": 1}  # it finished its job
    assert backlog.queue_counts() == (2, 0)  # the others wait in the queue, not in the stopped worker
    assert len(ACK_TIMEOUT.findall(backlog.node.log())) == closures_before
