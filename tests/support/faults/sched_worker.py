"""The module the scheduler test starts `periodiq` and `dramatiq` with: one job that runs every minute."""

from __future__ import annotations

import dramatiq
from periodiq import cron

from pipelines.app import configure
from pipelines.schedules.ticks import current_tick
from tests.support.faults.fault_actors import Ledger

app = configure()
broker = app.broker
ledger = Ledger(app.settings.namespace)


@dramatiq.actor(broker=broker, periodic=cron("* * * * *"))
def minutely() -> None:
    ledger.append("ticks", "minutely", current_tick() or 0)
