"""The run store's index of runs: written beside the runs as they are created, read a page at a time.

Two Redis sorted sets of run ids scored by creation time (epoch ms): every run of the namespace
(``<namespace>:runs``) and each pipeline's (``<namespace>:runs:p:<pipeline>``); and a third of the
runs still going by when each was last touched (``<namespace>:runs:running``: created, with its start
delay, then as the stall sweep saw it, which drops the runs that ended). They are keys of their own, in
other slots than the runs on a Redis Cluster, so they are written after the runs' scripts in the same
round trip, not inside them; entries of runs created more than a retention ago are trimmed,
and the index's expiry renewed, as new runs come (at most once a second per index and process: each
start adds its entry, not three commands). A page walks one index newest first, a slice per round
trip, and reads the runs in the slice (a pipeline, which a cluster client splits by shard); a state is
checked against each run's own record, so a page never shows a run in a state it has left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from pipelines.store import replies
from pipelines.store.base import NewRun, RunPage, RunQuery, RunSummary
from pipelines.wire.naming import pipeline_runs_key, recent_runs_key, run_key, running_runs_key

#: Seconds between two trims (and expiry renewals) of one index by one process, at least (a tenth of
#: the retention where that is shorter).
MAINTAIN_EVERY_S = 1.0
#: How many index entries ``find_runs`` reads per round trip, at most.
FIND_RUNS_SLICE = 1000
#: The most index entries one page reads: a state no recent run is in ends the page there, with a
#: cursor to read on from, instead of one request walking the whole index.
FIND_RUNS_MOST_READ = 10 * FIND_RUNS_SLICE
#: The run fields a list of runs shows (``find_runs``), in the order ``replies.run_summary`` takes them.
SUMMARY_FIELDS = (
    "pipeline",
    "status",
    "created_at",
    "started_at",
    "finished_at",
    "error",
    "failed_step",
    "idempotency_key",
    "correlation_id",
    "trace_id",
    "done",
)


class RunIndex:
    """The namespace's run indexes on one Redis (or Redis Cluster) client."""

    def __init__(
        self,
        *,
        client: redis.Redis | RedisCluster,
        namespace: str,
        retention_ms: int,
        answering: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._redis = client
        self._namespace = namespace
        self._retention_ms = retention_ms
        self._answering = answering
        #: When this process last trimmed each index (monotonic seconds); a race trims twice, harmlessly.
        self._maintained: dict[str, float] = {}
        self._maintain_every_s = min(MAINTAIN_EVERY_S, retention_ms / 10_000)

    def add(self, pipe: Any, runs: Sequence[NewRun]) -> None:
        """Queue the writes that index ``runs`` on ``pipe`` (after their creation); a run already indexed
        keeps its place (NX)."""
        now_ms = int(time.time() * 1000)
        expired = f"({now_ms - self._retention_ms}"
        recent, running = recent_runs_key(self._namespace), running_runs_key(self._namespace)
        indexes: dict[str, dict[str, int]] = {recent: {}, running: {}}
        for run in runs:
            indexes[recent][run.run_id] = now_ms
            indexes.setdefault(pipeline_runs_key(self._namespace, run.pipeline), {})[run.run_id] = now_ms
            indexes[running][run.run_id] = now_ms + run.delay_ms
        now = time.monotonic()
        for index, entries in indexes.items():
            pipe.zadd(index, entries, nx=True)
            if now - self._maintained.get(index, -self._maintain_every_s) >= self._maintain_every_s:
                self._maintained[index] = now
                pipe.zremrangebyscore(index, "-inf", expired)
                pipe.pexpire(index, self._retention_ms)

    def find(self, query: RunQuery, *, limit: int, cursor: str | None, keyed_run: str | None) -> RunPage:
        """The page of runs ``RunViews.find_runs`` answers; ``keyed_run`` is the run ``query.key`` started."""
        if query.key is not None:  # one key, one run: one page
            keyed = self._summaries([keyed_run] if keyed_run else [])
            return RunPage(tuple(run for run in keyed if run is not None and _matches(run, query, by_time=True)))
        index = recent_runs_key(self._namespace)
        if query.pipeline is not None:
            index = pipeline_runs_key(self._namespace, query.pipeline)
        top, passed = replies.parse_cursor(cursor)
        if cursor is None and query.until_ms is not None:
            top = str(query.until_ms)
        lowest = "-inf" if query.since_ms is None else str(query.since_ms)
        found: list[RunSummary] = []
        read = 0
        # Newest first, a slice of the index per round trip; each slice's runs are read in one more
        # (a pipeline: on a Redis Cluster the runs live on every shard). A rare state takes more slices.
        while True:
            # Without a state to look for, nearly every entry is a run to show: read no more than needed.
            size = FIND_RUNS_SLICE if query.state else min(FIND_RUNS_SLICE, limit - len(found))
            with self._answering():
                entries = cast(
                    list[tuple[bytes, float]],
                    self._redis.zrevrangebyscore(index, top, lowest, start=passed, num=size, withscores=True),
                )
            ids = [replies.text(run_id) for run_id, _ in entries]
            read += len(entries)
            in_state = self._in_state(ids, query.state) if query.state else None
            wanted = ids if in_state is None else [run_id for run_id in ids if run_id in in_state]
            summaries = dict(zip(wanted, self._summaries(wanted), strict=True))
            for position, run_id in enumerate(ids):
                run = summaries.get(run_id)
                if run is not None and _matches(run, query):
                    found.append(run)
                if len(found) == limit:
                    entries = entries[: position + 1]
                    more = True
                    break
            else:
                more = len(entries) == size
            if entries:
                top, passed = _after(entries, top, passed)
            if not more:
                return RunPage(tuple(found))
            if len(found) == limit or read >= FIND_RUNS_MOST_READ:
                return RunPage(tuple(found), f"{top}~{passed}")

    def _in_state(self, run_ids: Sequence[str], state: str) -> set[str]:
        """Those of the runs that are in ``state`` (one field read per run, in one round trip)."""
        if not run_ids:
            return set()
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.hget(run_key(self._namespace, run_id), "status")
            states = pipe.execute()
        return {run_id for run_id, found in zip(run_ids, states, strict=True) if found == state.encode()}

    def _summaries(self, run_ids: Sequence[str]) -> list[RunSummary | None]:
        """The runs' records (None for one past its retention), in one round trip."""
        if not run_ids:
            return []
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.hmget(run_key(self._namespace, run_id), SUMMARY_FIELDS)
                pipe.hlen(run_key(self._namespace, run_id) + ":steps")
            read = pipe.execute()
        return [
            replies.run_summary(run_id, fields, steps)
            for run_id, fields, steps in zip(run_ids, read[::2], read[1::2], strict=True)
        ]


def _matches(run: RunSummary, query: RunQuery, *, by_time: bool = False) -> bool:
    """Whether ``run`` is one ``query`` asks for; its times only ``by_time`` (an index walk bounds them by
    the index's scores: the producer's clock when it created the run, not Redis's)."""
    return (
        (query.state is None or run.state == query.state)
        and (query.pipeline is None or run.pipeline == query.pipeline)
        and not (by_time and query.since_ms is not None and run.created_at_ms < query.since_ms)
        and not (by_time and query.until_ms is not None and run.created_at_ms > query.until_ms)
    )


def _after(entries: Sequence[tuple[Any, float]], top: str, passed: int) -> tuple[str, int]:
    """The cursor after ``entries`` (index entries newest first, read from ``top`` past ``passed``)."""
    last = repr(int(entries[-1][1]))
    same = sum(1 for _, score in entries if repr(int(score)) == last)
    return last, same + (passed if last == top else 0)
