"""rabbit-pipelines side of the benchmark: the app from ``PIPELINES_*`` and the benchmark's actors.

Started as ``dramatiq bench.ours_worker:broker``; the benchmark process imports it too, to start runs.
With ``BENCH_COUNTERS_DIR`` set, each worker process writes its publish counts there when it stops; with
``BENCH_HOOK_COSTS_DIR`` set, its middleware hooks are timed (``bench.hook_costs``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
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


def _noop(key: str) -> None:
    counter.incr(key)


def _hop(key: str, value: int = 0) -> int:
    return value + 1


def _last(key: str, value: int) -> None:
    counter.incr(key)


def _member(key: str) -> int:
    return 1


def _gather(key: str, values: list[int]) -> None:
    counter.incrby(key, 1 if len(values) else 0)


def _ping(key: str) -> None:
    counter.lpush(key, b"1")


def _ping_last(key: str, value: int) -> None:
    counter.lpush(key, b"1")


def _branch(key: str, *_: Any) -> None:
    counter.incr(key)


#: Fan-out branches: one actor each, all of them ``_branch``.
BRANCHES = 16


@dataclass(frozen=True)
class Actors:
    """The benchmark's actors, declared on one broker (each counts what it did in ``counter``, in Redis)."""

    noop: dramatiq.Actor[..., None]
    hop: dramatiq.Actor[..., int]
    last: dramatiq.Actor[..., None]
    member: dramatiq.Actor[..., int]
    gather: dramatiq.Actor[..., None]
    ping: dramatiq.Actor[..., None]
    ping_last: dramatiq.Actor[..., None]
    branches: tuple[dramatiq.Actor[..., None], ...]


def declare_actors(on: dramatiq.Broker) -> Actors:
    """The benchmark's actors declared on broker ``on``: this module's app's, or another app's that starts
    the same runs through another run store (its workers import this module with that store configured)."""

    def declare(fn: Callable[..., Any], name: str) -> Any:
        return dramatiq.actor(actor_name=name, broker=on, queue_name="bench")(fn)

    return Actors(
        noop=declare(_noop, "noop"),
        hop=declare(_hop, "hop"),
        last=declare(_last, "last"),
        member=declare(_member, "member"),
        gather=declare(_gather, "gather"),
        ping=declare(_ping, "ping"),
        ping_last=declare(_ping_last, "ping_last"),
        branches=tuple(declare(_branch, f"branch{i}") for i in range(BRANCHES)),
    )


actors = declare_actors(broker)
