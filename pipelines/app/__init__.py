"""The composition root: the broker, its middleware, the run store and the runtime, built from config.

Nothing else in the core builds a broker. ``configure()`` builds the app once per process and makes
its broker Dramatiq's broker, which is how actors declared with ``@dramatiq.actor`` and the stock
``dramatiq`` and ``periodiq`` CLIs find it.
"""

from __future__ import annotations

from pipelines.app.application import App
from pipelines.app.building import build_app, configure, current_app
from pipelines.stack import build_middleware

__all__ = ["App", "build_app", "build_middleware", "configure", "current_app"]
