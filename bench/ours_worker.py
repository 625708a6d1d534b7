"""rabbit-pipelines side of the benchmark: the app from ``PIPELINES_*`` and the benchmark's actors.

Started as ``dramatiq bench.ours_worker:broker``; the benchmark process imports it too, to start runs.
With ``BENCH_COUNTERS_DIR`` set, each worker process writes its publish counts there when it stops; with
``BENCH_HOOK_COSTS_DIR`` set, its middleware hooks are timed (``bench.hook_costs``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dramatiq
import redis

from bench import hook_costs
from pipelines.app import configure

app = configure()
broker = app.broker
counter: Any = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


class PublishCounts(dramatiq.Middleware):
    """Writes this process's publishes and publisher-confirm waits to ``<BENCH_COUNTERS_DIR>/<pid>.json``
    when its worker stops (the benchmark reads them once the worker is gone)."""

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        hook_costs.dump()
        directory = os.environ.get("BENCH_COUNTERS_DIR")
        if directory:
            counts = {"publishes": app.broker.publish_count, "confirm_waits": app.broker.confirm_waits}
            Path(directory, f"{os.getpid()}.json").write_text(json.dumps(counts))


broker.add_middleware(PublishCounts())
hook_costs.install(broker)


@dramatiq.actor(broker=broker, queue_name="bench")
def noop(key: str) -> None:
    counter.incr(key)


@dramatiq.actor(broker=broker, queue_name="bench")
def hop(key: str, value: int = 0) -> int:
    return value + 1


@dramatiq.actor(broker=broker, queue_name="bench")
def last(key: str, value: int) -> None:
    counter.incr(key)


@dramatiq.actor(broker=broker, queue_name="bench")
def member(key: str) -> int:
    return 1


@dramatiq.actor(broker=broker, queue_name="bench")
def gather(key: str, values: list[int]) -> None:
    counter.incrby(key, 1 if len(values) else 0)


@dramatiq.actor(broker=broker, queue_name="bench")
def ping(key: str) -> None:
    counter.lpush(key, b"1")


def _branch(index: int) -> dramatiq.Actor[Any, Any]:
    def branch(key: str, *_: Any) -> None:
        counter.incr(key)

    return dramatiq.actor(actor_name=f"branch{index}", broker=broker, queue_name="bench")(branch)


BRANCHES = [_branch(i) for i in range(16)]
