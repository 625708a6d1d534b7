"""The fault suite's fixtures: a namespace, `dramatiq` worker processes to kill, a producer app, a ledger."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.app import App, build_app
from pipelines.config import Settings
from tests.housekeeping import fresh_namespace, start_process, stop_process

FAULTS = Path(__file__).resolve().parent
ROOT = FAULTS.parents[1]
sys.path.insert(0, str(FAULTS))  # the worker imports these modules by name; so does the producer

from fault_actors import Ledger, declare  # noqa: E402

AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: Leases short enough that work held by a killed worker is taken over within seconds.
LEASE_S = 4
TIME_LIMIT_S = 3
DELIVERY_LIMIT = 2
#: Longest any fault scenario may take to settle.
SETTLE_TIMEOUT_S = 240


class Workers:
    """`dramatiq fault_worker` processes that the test starts, SIGKILLs and restarts."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self, *, threads: int = 8, module: str = "fault_worker", extra: tuple[str, ...] = ()) -> None:
        with self.log.open("ab") as log:
            # Its own process group (so a kill takes the worker processes too), stopped even if the test fails.
            self.process = start_process(
                [
                    *(str(Path(sys.executable).parent / "dramatiq"), module, "--path", str(FAULTS)),
                    *("--processes", "1", "--threads", str(threads), *extra),
                ],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )

    def kill(self) -> None:
        """SIGKILL every process of the worker, as an OOM killer or a lost machine would."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.kills += 1

    def terminate(self, timeout_s: float = 120) -> int:
        """SIGTERM to the main process, as an orchestrator stopping the worker does; returns the exit status.

        Only the main process: it forwards the signal to its worker processes, and a worker process
        that gets a second SIGTERM (one from the group, one forwarded) stops at once instead of gracefully.
        """
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)

    def died(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


class Fault:
    """One fault scenario's namespace: the producer app, its actors, the ledger, the workers."""

    def __init__(self, settings: Settings, env: dict[str, str], log: Path) -> None:
        self.app: App = build_app(settings)
        self.actors = declare(self.app.broker, settings.namespace)
        self.ledger = Ledger(settings.namespace)
        self.workers = Workers(env, log)
        self.log = log

    def wait_until(self, done: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait for a condition another process brings about (polling: there is nothing to subscribe to)."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"timed out waiting for {what}; worker log tail:\n{tail}")
            time.sleep(0.1)


@pytest.fixture
def fault(services: None, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    namespace = fresh_namespace()
    values: dict[str, Any] = {
        "namespace": namespace,
        "broker": {"url": AMQP_URL, "delivery_limit": DELIVERY_LIMIT},
        "store": {"url": REDIS_URL, "step_lease_s": LEASE_S},
        "worker": {"time_limit_s": TIME_LIMIT_S},
        "retries": {"max_retries": 5, "min_backoff_s": 0.05, "max_backoff_s": 0.5},
        "logging": {"format": "text", "level": "WARNING"},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_BROKER__DELIVERY_LIMIT": str(DELIVERY_LIMIT),
        "PIPELINES_STORE__URL": REDIS_URL,
        "PIPELINES_STORE__STEP_LEASE_S": str(LEASE_S),
        "PIPELINES_WORKER__TIME_LIMIT_S": str(TIME_LIMIT_S),
        "PIPELINES_RETRIES__MAX_RETRIES": "5",
        "PIPELINES_RETRIES__MIN_BACKOFF_S": "0.05",
        "PIPELINES_RETRIES__MAX_BACKOFF_S": "0.5",
        "PIPELINES_LOGGING__FORMAT": "text",
        "PIPELINES_LOGGING__LEVEL": "WARNING",
    }
    scenario = Fault(Settings.from_values(values), env, tmp_path / "worker.log")
    yield scenario
    scenario.workers.stop()
    scenario.ledger.clear()
    scenario.app.close()
    delete_namespace(namespace)
