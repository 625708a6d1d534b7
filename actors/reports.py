"""A daily sales report built by a chord over data shards, scheduled nightly with periodiq."""

from __future__ import annotations

import datetime
import random
from typing import Any

import dramatiq
from periodiq import cron

import pipelines

#: Shards the nightly report reads.
NIGHTLY_SHARDS = 8


@dramatiq.actor(queue_name="reports")
def load_shard(shard: int, day: str) -> dict[str, Any]:
    """Aggregate one shard's sales of ``day`` (deterministic sample data)."""
    rng = random.Random(f"{day}/{shard}")
    orders = rng.randint(50, 150)
    return {"shard": shard, "orders": orders, "revenue": round(orders * rng.uniform(20, 80), 2)}


@dramatiq.actor(queue_name="reports")
def build_report(day: str, shards: list[dict[str, Any]]) -> dict[str, Any]:
    """Add up the shards into the day's report."""
    return {
        "day": day,
        "shards": len(shards),
        "orders": sum(s["orders"] for s in shards),
        "revenue": round(sum(s["revenue"] for s in shards), 2),
    }


@dramatiq.actor(queue_name="reports", periodic=cron("0 2 * * *"), missed="catch_up")
def nightly_report() -> None:
    """Every night at 02:00, start yesterday's report (once per day, even if the tick repeats); a night
    missed while no scheduler ran is caught up once when one runs again."""
    day = (datetime.date.today() - datetime.timedelta(days=1)).isoformat()
    pipelines.current_app().run("shard_report", day=day, shards=NIGHTLY_SHARDS, idempotency_key=f"report-{day}")
