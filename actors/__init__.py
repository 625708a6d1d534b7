"""The example domain's actors: orders, notifications, reports and images.

This package is the application's entry point, and so the one place that builds the app at import:
the stock ``dramatiq actors`` CLI imports it and takes Dramatiq's broker, so the broker must exist
(from ``config.toml`` and ``PIPELINES_*``) before the actors below are declared on it. A process that
configured an app already (the CLI, the demo, tests) keeps its own.
"""

from __future__ import annotations

from pipelines.app import configure

app = configure()
broker = app.broker

from actors import images, notifications, orders, reports  # noqa: E402  (declared on the broker above)

__all__ = ["app", "broker", "images", "notifications", "orders", "reports"]
