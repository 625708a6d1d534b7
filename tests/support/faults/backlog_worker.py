"""The module `dramatiq` starts in the long-running backlog test: the app from PIPELINES_*, and its job."""

from __future__ import annotations

import os
import time
from typing import Any

import dramatiq
import redis

from pipelines import report_progress
from pipelines.app import configure

#: Redis hash counting each job's starts and ends (the test's ledger).
LEDGER_URL = os.environ.get("BACKLOG_LEDGER_URL", "redis://127.0.0.1:6379/15")


def declare(broker: Any, namespace: str) -> dramatiq.Actor[Any, Any]:
    """The long-running job of the test: counts its start, reports progress for ``seconds``, counts its end."""
    ledger: Any = redis.Redis.from_url(LEDGER_URL)

    @dramatiq.actor(broker=broker, profile="long_running", lease_s=3, timeout_s=300, max_retries=0)
    def export(item: str, seconds: float) -> None:
        ledger.hincrby(f"{namespace}:ledger:starts", item, 1)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            report_progress(1 - (deadline - time.monotonic()) / seconds, item)
            time.sleep(0.2)
        ledger.hincrby(f"{namespace}:ledger:ends", item, 1)

    return export


if os.environ.get("PIPELINES_NAMESPACE"):  # imported by `dramatiq backlog_worker`, not by the test
    app = configure()
    broker = app.broker
    declare(broker, app.settings.namespace)
