"""What worker processes record in the run store on Redis: their heartbeats and their message counts.

A heartbeat is a key of its own per process, with an index of the processes by their latest beat; a
minute's message counts are one hash (see :mod:`pipelines.store.counts`), changed by ``counts_add.lua``.
Both lapse on their own: a heartbeat an hour after its last beat, a minute's counts an hour after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import redis
from redis.cluster import RedisCluster

from pipelines.store import replies
from pipelines.store.answering import answering
from pipelines.store.base import WorkerBeat
from pipelines.store.counts import ActorCounts, MinuteCounts, minute_of, minutes_between
from pipelines.store.scripting import Scripts
from pipelines.wire.naming import counts_key, worker_key, workers_key


class RedisWorkerRecords:
    """The roles ``WorkerBeats`` and ``MessageCounts`` on Redis, and what every part of the Redis store
    shares: the client, the scripts, and how a call reports a Redis that does not answer."""

    def __init__(self, *, client: redis.Redis | RedisCluster, scripts: Scripts, url: str, namespace: str) -> None:
        self._redis = client
        self._scripts = scripts
        self._url = url
        self._namespace = namespace
        self._counts_add = scripts.register("counts_add")

    def _answering(self) -> AbstractContextManager[None]:
        return answering(self._url)

    def beat(self, worker: WorkerBeat, *, keep_ms: int) -> None:
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)  # two keys, two slots in a cluster: not atomic
            pipe.set(worker_key(self._namespace, worker.worker_id), worker.to_json(), px=keep_ms)
            pipe.zadd(workers_key(self._namespace), {worker.worker_id: worker.beat_at_ms})
            pipe.execute()

    def forget_worker(self, worker_id: str) -> None:
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(worker_key(self._namespace, worker_id))
            pipe.zrem(workers_key(self._namespace), worker_id)
            pipe.execute()

    def worker_beats(self) -> list[WorkerBeat]:
        with self._answering():
            ids = [replies.text(i) for i in self._redis.zrevrange(workers_key(self._namespace), 0, -1)]
            if not ids:
                return []
            pipe = self._redis.pipeline(transaction=False)
            for worker_id in ids:
                pipe.get(worker_key(self._namespace, worker_id))
            found = pipe.execute()
            lapsed = [worker_id for worker_id, raw in zip(ids, found, strict=True) if raw is None]
            if lapsed:  # kept long enough after their last beat: dropped
                self._redis.zrem(workers_key(self._namespace), *lapsed)
        return [WorkerBeat.from_json(raw) for raw in found if raw is not None]

    def add_counts(self, minutes: Mapping[int, Mapping[str, ActorCounts]], *, keep_ms: int) -> None:
        calls = []
        for minute_ms, actors in sorted(minutes.items()):
            fields: list[str | int] = []
            for actor, counts in actors.items():
                for field, count in counts.fields(actor).items():
                    fields += [field, count]
            if fields:
                calls.append(([counts_key(self._namespace, minute_of(minute_ms))], [keep_ms, *fields]))
        if not calls:
            return

        # One script per minute (each atomic), all in one round trip: minutes are in different Redis
        # Cluster slots, which one script may not span.
        def fill(pipe: Any) -> None:
            for keys, args in calls:
                self._scripts.queue(pipe, self._counts_add, keys, args)

        with self._answering():
            for reply in self._scripts.execute(fill):
                replies.counts_add(reply)

    def message_counts(self, from_ms: int, to_ms: int) -> list[MinuteCounts]:
        minutes = minutes_between(from_ms, to_ms)
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            for minute_ms in minutes:
                pipe.hgetall(counts_key(self._namespace, minute_ms))
            found = pipe.execute()
        return [MinuteCounts.from_fields(minute_ms, fields) for minute_ms, fields in zip(minutes, found, strict=True)]
