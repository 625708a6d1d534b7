"""The example domain's actors: orders, notifications, reports, images, timelines and exports.

This package is the application's entry point, and so the one place that builds the app at import:
the stock ``dramatiq actors`` CLI imports it and takes Dramatiq's broker, so the broker must exist
(from ``config.toml`` and ``PIPELINES_*``) before the actors below are declared on it. A process that
configured an app already (the CLI, tests) keeps its own.
"""

from __future__ import annotations

from pipelines.app import configure

app = configure()
broker = app.broker

from actors import exports, images, notifications, orders, registry, reports, timeline  # noqa: E402  (declared on the broker above)

# The example pipelines, registered where the app is built: every process that imports the actors
# (workers, schedulers, the CLI, the demo) can start them by name.
registry.register_all(app)

__all__ = ["app", "broker", "exports", "images", "notifications", "orders", "registry", "reports", "timeline"]
