"""One fault scenario (the ``fault`` fixture's type): a producer app, the fault actors, their ledger and
the `dramatiq` worker processes the test starts, kills and restarts.

The worker processes import the suite's modules by their qualified names too (``dramatiq
tests.support.faults.fault_worker`` from the repository's root).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.app import App, build_app
from pipelines.config.settings import Settings
from tests.support.faults.fault_actors import Ledger, declare
from tests.support.housekeeping import start_process, stop_process

FAULTS = Path(__file__).resolve().parent
ROOT = FAULTS.parents[2]
#: The package of the modules the worker processes import.
PACKAGE = "tests.support.faults"
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
                    *(str(Path(sys.executable).parent / "dramatiq"), f"{PACKAGE}.{module}", "--path", str(ROOT)),
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

    def discard(self) -> None:
        """Kill whatever of the workers still runs, at once: for a fixture's teardown, when the test is
        over and nothing reads what the workers do any more. A graceful stop spends about 3 s in
        Dramatiq's one-second polling loops; ``test_shutdown.py`` tests it."""
        if self.process is not None:
            stop_process(self.process, timeout_s=0)


class Fault:
    """One fault scenario's namespace: the producer app, its actors, the ledger, the workers."""

    def __init__(self, settings: Settings, env: dict[str, str], log: Path) -> None:
        self.app: App = build_app(settings)
        self.actors = declare(self.app.broker, settings.namespace)
        self.ledger = Ledger(settings.namespace)
        self.workers = Workers(env, log)
        self.log = log

    def discard(self, delete_namespace: Callable[[str], None]) -> None:
        """After its test: kill what is left of its workers, clear its ledger, close its app and delete its
        namespace (``delete_namespace``, the fixture)."""
        self.workers.discard()
        self.ledger.clear()
        self.app.close()
        delete_namespace(self.app.settings.namespace)

    def wait_until(self, done: Callable[[], object], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until ``done()`` is true, a condition another process brings about (polling: there is
        nothing to subscribe to)."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"timed out waiting for {what}; worker log tail:\n{tail}")
            time.sleep(0.1)

    def wait_count(self, count: Callable[[], int], at_least: int, what: str) -> None:
        """Wait until ``count()`` reaches ``at_least`` (a threshold that changes from one loop round to the next)."""
        self.wait_until(lambda: count() >= at_least, what)
