"""The fault suite's fixtures: a namespace, `dramatiq` worker processes to kill, a producer app, a ledger."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.config.settings import Settings
from tests.backends import AMQP_URL, REDIS_URL
from tests.housekeeping import fresh_namespace

# The worker imports this suite's modules by name; so does the producer.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_scenario import Fault

#: Leases short enough that work held by a killed worker is taken over within seconds.
LEASE_S = 4
TIME_LIMIT_S = 3
DELIVERY_LIMIT = 2


@pytest.fixture
def fault(services: None, delete_namespace: Callable[[str], None], tmp_path: Path) -> Iterator[Fault]:
    namespace = fresh_namespace()
    values: dict[str, Any] = {
        "namespace": namespace,
        "broker": {"url": AMQP_URL, "delivery_limit": DELIVERY_LIMIT},
        "store": {"url": REDIS_URL, "step_lease_s": LEASE_S},
        "worker": {"time_limit_s": TIME_LIMIT_S},
        "retries": {"max_retries": 5, "min_backoff_s": 0.05, "max_backoff_s": 0.5},
        "logging": {"format": "text", "level": "WARNING"},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_BROKER__DELIVERY_LIMIT": str(DELIVERY_LIMIT),
        "PIPELINES_STORE__URL": REDIS_URL,
        "PIPELINES_STORE__STEP_LEASE_S": str(LEASE_S),
        "PIPELINES_WORKER__TIME_LIMIT_S": str(TIME_LIMIT_S),
        "PIPELINES_RETRIES__MAX_RETRIES": "5",
        "PIPELINES_RETRIES__MIN_BACKOFF_S": "0.05",
        "PIPELINES_RETRIES__MAX_BACKOFF_S": "0.5",
        "PIPELINES_LOGGING__FORMAT": "text",
        "PIPELINES_LOGGING__LEVEL": "WARNING",
    }
    scenario = Fault(Settings.from_values(values), env, tmp_path / "worker.log")
    yield scenario
    scenario.workers.stop()
    scenario.ledger.clear()
    scenario.app.close()
    delete_namespace(namespace)
