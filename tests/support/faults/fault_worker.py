"""The module `dramatiq` starts in the fault suite: the app from PIPELINES_*, and the fault actors."""

from __future__ import annotations

from pipelines.app import configure
from tests.support.faults.fault_actors import declare

app = configure()
broker = app.broker
declare(broker, app.settings.namespace)
