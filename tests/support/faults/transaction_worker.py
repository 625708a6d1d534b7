"""The module `dramatiq` starts for the fault suite's transactional effects: the app from PIPELINES_*, and
the actor that writes its effect in its step's transaction."""

from __future__ import annotations

from pipelines.app import configure
from tests.support.faults.transaction_actors import declared_here

app = configure()
broker = app.broker
declared_here(broker, app.settings.namespace)
