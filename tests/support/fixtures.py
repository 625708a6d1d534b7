"""The types of the suite's shared fixtures (``tests/conftest.py``), for tests to annotate them with.

``make_app: MakeApp``, ``start_worker: StartWorker`` and ``observe: Observe`` (which attaches an
:class:`Observer`); ``backend`` is a ``Backend``, of ``tests/support/backends.py``. The fault suite's
``fault`` fixture is a ``Fault``, of ``tests/support/faults/fault_scenario.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq
from opentelemetry.sdk.trace.export import SpanExporter

from pipelines.app import App

__all__ = ["MakeApp", "Observe", "Observer", "StartWorker"]


class MakeApp(Protocol):
    """``make_app(**sections)``: an app on the test's backend in a namespace of its own, deleted after the test.

    Each keyword is a settings section (a dict merged into the test's defaults) or a top-level value
    (``namespace="..."``); ``span_exporter`` receives the app's spans.
    """

    def __call__(self, span_exporter: SpanExporter | None = None, **sections: Any) -> App: ...


class StartWorker(Protocol):
    """``start_worker(app)``: a started worker for the app's declared actors (or only those of ``queues``),
    stopped after the test."""

    def __call__(self, app: App, *, threads: int = 4, queues: set[str] | None = None) -> dramatiq.Worker: ...


class Observer(dramatiq.Middleware):
    """Counts every message the worker finished handling, by actor, so tests await counts, not time.

    It is the first middleware, so its ``after_*`` hooks run last: once a count is reached, every other
    middleware has recorded what it decided about those messages (metrics, the run store, spans).
    """

    def __init__(self) -> None:
        self.handled: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.dead_lettered: dict[str, int] = {}
        self._changed = threading.Condition()

    def _count(self, table: dict[str, int], message: dramatiq.broker.MessageProxy) -> None:
        with self._changed:
            table[message.actor_name] = table.get(message.actor_name, 0) + 1
            self._changed.notify_all()

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._count(self.handled, message)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._count(self.handled, message)
        self._count(self.skipped, message)

    def after_nack(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._count(self.dead_lettered, message)

    def _wait(self, table: dict[str, int], what: str, actor_name: str, count: int, timeout_s: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: table.get(actor_name, 0) >= count, timeout_s):
                raise AssertionError(f"only {table.get(actor_name, 0)} of {count} messages of {actor_name} {what}")

    def wait_handled(self, actor_name: str, count: int, timeout_s: float = 30) -> None:
        """Block until ``count`` messages of ``actor_name`` were handled (run or skipped)."""
        self._wait(self.handled, "were handled", actor_name, count, timeout_s)

    def wait_dead_lettered(self, actor_name: str, count: int, timeout_s: float = 30) -> None:
        """Block until ``count`` messages of ``actor_name`` were rejected to their dead-letter queue."""
        self._wait(self.dead_lettered, "were dead-lettered", actor_name, count, timeout_s)


#: ``observe(app)``: attaches an :class:`Observer` to the app's broker, first in its middleware.
Observe = Callable[[App], Observer]
