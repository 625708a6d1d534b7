"""Helpers for testing your own actors and pipelines, embedded (no services) or on real ones.

    from pipelines.testing import embedded_app, running_worker

    def test_order_fulfilment():
        with embedded_app() as app, running_worker(app):
            charge = dramatiq.actor(charge_payment_fn, broker=app.broker)   # or import your actors
            status = app.start(chain(...), args=(42,)).wait(timeout_s=10)
            assert status.state == "succeeded"

Or as pytest fixtures in your ``conftest.py``::

    @pytest.fixture
    def app():
        with embedded_app() as app, running_worker(app):
            yield app
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dramatiq

from pipelines.app import App, build_app
from pipelines.config.settings import Settings

__all__ = ["boot", "embedded_app", "embedded_settings", "running_worker"]

_BOOTED = "_pipelines_booted"


def embedded_settings(namespace: str | None = None, **sections: Mapping[str, Any]) -> Settings:
    """Settings for an in-memory broker and store; ``sections`` override config sections."""
    data: dict[str, Any] = {
        "namespace": namespace or f"test-{uuid.uuid4().hex[:8]}",
        "broker": {"url": "memory://"},
        "store": {"url": "memory://"},
    }
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return Settings.from_values(data)


@contextmanager
def embedded_app(namespace: str | None = None, **sections: Mapping[str, Any]) -> Iterator[App]:
    """An app on the embedded broker and store, closed on exit. Declare actors with ``broker=app.broker``."""
    app = build_app(embedded_settings(namespace, **sections))
    try:
        yield app
    finally:
        app.close()


def boot(app: App) -> None:
    """Do once what the `dramatiq` CLI does in each worker process before its worker starts.

    Middleware start their process-wide machinery here (the time-limit watchdog, log formatting).
    """
    if not getattr(app.broker, _BOOTED, False):
        setattr(app.broker, _BOOTED, True)
        app.broker.emit_after("process_boot")


@contextmanager
def running_worker(app: App, *, threads: int = 4) -> Iterator[dramatiq.Worker]:
    """A Dramatiq worker for every actor declared on ``app.broker``, stopped on exit.

    Actors declared after it started are consumed too (see ``pipelines.broker.rabbitmq.consuming``).
    """
    boot(app)
    worker = dramatiq.Worker(app.broker, worker_threads=threads, worker_timeout=100)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
