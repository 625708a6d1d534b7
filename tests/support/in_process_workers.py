"""Workers started in the test process for an app's declared actors: what the ``start_worker`` fixture
hands out, and what a scenario running in a thread of its own uses in its place."""

from __future__ import annotations

import dramatiq

from pipelines.app import App
from pipelines.testing import boot


class InProcessWorkers:
    """Starts workers (:meth:`start`, a ``StartWorker``) and stops every one of them (:meth:`stop_all`)."""

    def __init__(self) -> None:
        self.started: list[dramatiq.Worker] = []

    def start(self, app: App, *, threads: int = 4, queues: set[str] | None = None) -> dramatiq.Worker:
        """A started worker for ``app``'s declared actors (declare them first), or only those of ``queues``."""
        boot(app)
        worker = dramatiq.Worker(app.broker, queues=queues, worker_threads=threads, worker_timeout=100)
        worker.start()
        self.started.append(worker)
        return worker

    def stop_all(self) -> None:
        """Stop every worker, even when stopping one fails (the first failure is raised afterwards)."""
        failures: list[Exception] = []
        for worker in self.started:
            try:
                worker.stop()
            except Exception as e:  # re-raised below, after the other workers stopped
                failures.append(e)
        if failures:
            raise failures[0]
