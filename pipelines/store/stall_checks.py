"""The run store's side of the stall sweep: runs kept alive while their steps run, and stalled ones found.

A run is touched whenever something advances it (``stall.lua`` lists what does) and, while one of its
steps runs, by its worker's keep-alive. The index of running runs (``<namespace>:runs:running``,
:mod:`pipelines.store.index`) holds each run by when it was last touched as the sweep last saw it, so a
sweep reads only the entries older than its threshold, not every run: each is looked at atomically in its
own slot (``stall.lua``: still alive, to re-drive, or failed), all of them in one round trip, and the
index follows what was found (ended runs leave it, the others move to their last touch). The sweep's
clock (``stall_clock.lua``) starts again after a gap in sweeping (the store or every worker was down),
so nothing that could not run meanwhile is taken for stalled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from pipelines.store import replies
from pipelines.store.base import StallCheck
from pipelines.store.scripting import Scripts
from pipelines.wire.naming import local_steps_key, run_key, running_runs_key, stall_sweep_key

#: How long after a local step's lease would lapse the lapse sweep looks at it, in ms (clocks differ).
LAPSE_MARGIN_MS = 1000


class RunStalls:
    """Keep-alives and stall checks of one namespace's runs, on one Redis (or Redis Cluster) client."""

    def __init__(
        self,
        *,
        client: redis.Redis | RedisCluster,
        scripts: Scripts,
        namespace: str,
        retention_ms: int,
        answering: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._redis = client
        self._scripts = scripts
        self._namespace = namespace
        self._retention_ms = retention_ms
        self._answering = answering
        self._touch = scripts.register("touch")
        self._stall_clock = scripts.register("stall_clock")
        self._stall = scripts.register("stall")
        self._lapsed = scripts.register("lapsed")

    def _key(self, run_id: str) -> str:
        return run_key(self._namespace, run_id)

    def keep_alive(self, run_ids: Collection[str]) -> int:
        """``StallChecks.keep_alive``."""
        ids = list(run_ids)
        if not ids:
            return 0

        # One script per run, all in one round trip: runs are in different Redis Cluster slots.
        def fill(pipe: Any) -> None:
            for run_id in ids:
                self._scripts.queue(pipe, self._touch, [self._key(run_id)], [])

        with self._answering():
            return replies.touch(self._scripts.execute(fill))

    def sweep(self, *, stalled_after_ms: int, redrives: int, gap_ms: int, limit: int) -> list[StallCheck]:
        """``StallChecks.sweep_stalled``."""
        with self._answering():
            clock = self._scripts.run(
                self._stall_clock, [stall_sweep_key(self._namespace)], [gap_ms, self._retention_ms]
            )
        now_ms, resumed_ms = replies.stall_clock(clock)
        index = running_runs_key(self._namespace)
        with self._answering():
            found = self._redis.zrangebyscore(index, "-inf", now_ms - stalled_after_ms, start=0, num=limit)
        ids = [replies.text(run_id) for run_id in cast(list[bytes], found)]
        if not ids:
            return []
        args = [stalled_after_ms, redrives, resumed_ms, self._retention_ms]

        def fill(pipe: Any) -> None:
            for run_id in ids:
                self._scripts.queue(pipe, self._stall, [self._key(run_id)], args)

        with self._answering():
            looked = self._scripts.execute(fill)
        checks = [replies.stall(run_id, reply) for run_id, reply in zip(ids, looked, strict=True)]
        ended = [check.run_id for check in checks if check.kind in ("gone", "failed")]
        touched = {check.run_id: check.touched_ms for check in checks if check.kind in ("alive", "redrive")}
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            if ended:
                pipe.zrem(index, *ended)
            if touched:
                pipe.zadd(index, cast(dict[Any, Any], touched), xx=True)
            pipe.execute()
        return checks

    def sweep_lapsed(self, *, lease_ms: int, limit: int) -> list[StallCheck]:
        """``StallChecks.sweep_lapsed``."""
        index = local_steps_key(self._namespace)
        now_ms = time.time() * 1000
        with self._answering():
            found = self._redis.zrangebyscore(index, "-inf", now_ms, start=0, num=limit)
        entries = [replies.text(entry) for entry in cast(list[bytes], found)]
        run_ids = sorted({entry.split(" ", 1)[0] for entry in entries})
        if not run_ids:
            return []

        def fill(pipe: Any) -> None:
            for run_id in run_ids:
                self._scripts.queue(pipe, self._lapsed, [self._key(run_id)], [])

        with self._answering():
            looked = self._scripts.execute(fill)
        checks = {run_id: replies.lapsed(run_id, reply) for run_id, reply in zip(run_ids, looked, strict=True)}
        done, later = [], {}
        for entry in entries:
            check = checks[entry.split(" ", 1)[0]]
            if check.kind == "gone":
                done.append(entry)
            else:  # held: look again when its lease would lapse; re-driven: when the copy's claim would
                later[entry] = (check.touched_ms if check.kind == "alive" else now_ms + lease_ms) + LAPSE_MARGIN_MS
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            if done:
                pipe.zrem(index, *done)
            if later:
                pipe.zadd(index, cast(dict[Any, Any], later), xx=True)
            pipe.execute()
        return list(checks.values())
