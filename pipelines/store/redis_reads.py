"""Runs read on Redis: a run and its steps, awaited without polling, found by key, by start or by index;
what a run keeps besides its steps (its plan's continuations, its steps' results) and its steps' logs.

:class:`RedisRunReads` is the reading half of :class:`~pipelines.store.redis.RedisRunStore`, which adds
the scripts that start and advance runs. Reads are plain commands (no script), decoded in
:mod:`pipelines.store.replies` and :mod:`pipelines.store.step_history`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, cast

from pipelines.store import replies
from pipelines.store.base import FINAL_RUN_STATES, RunPage, RunQuery, RunState, RunStatus
from pipelines.store.feed import RedisRunFeed, wait_on_channel
from pipelines.store.index import RunIndex
from pipelines.store.redis_records import RedisRecords
from pipelines.store.step_history import AttemptLog, attempt_logs
from pipelines.wire.naming import recent_runs_key, run_id_for_key, run_key
from pipelines.wire.steps import ROOT


class RedisRunReads(RedisRecords):
    """The reads of the roles ``RunViews``, ``RunFeeds``, ``RunPlans`` and ``StepLogs`` on Redis (with the
    records of :class:`~pipelines.store.redis_records.RedisRecords`)."""

    def __init__(self, **records: Any) -> None:
        super().__init__(**records)
        self._index = RunIndex(
            client=self._redis, namespace=self._namespace, retention_ms=self._retention_ms, answering=self._answering
        )

    def _key(self, run_id: str) -> str:
        return run_key(self._namespace, run_id)

    def recent_runs(self, limit: int) -> list[str]:
        with self._answering():
            ids = self._redis.zrevrange(recent_runs_key(self._namespace), 0, limit - 1)
        return [replies.text(run_id) for run_id in ids]

    def run_ids_starting(self, prefix: str, *, limit: int) -> list[str]:
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"
        found: list[str] = []
        with self._answering():
            for run_id, _ in self._redis.zscan_iter(recent_runs_key(self._namespace), match=pattern):
                found.append(replies.text(run_id))
                if len(found) >= limit:
                    break
        return found

    def find_runs(self, query: RunQuery, *, limit: int, cursor: str | None = None) -> RunPage:
        run_id = self.run_for_key(query.key) if query.key is not None and cursor is None else None
        return self._index.find(query, limit=limit, cursor=cursor, keyed_run=run_id)

    def run_for_key(self, idempotency_key: str) -> str | None:
        run_id = run_id_for_key(self._namespace, idempotency_key)
        with self._answering():
            exists = self._redis.exists(self._key(run_id))
        return run_id if exists else None

    def get_run(self, run_id: str) -> RunStatus | None:
        key = self._key(run_id)
        with self._answering():
            pipe = self._redis.pipeline(transaction=True)
            pipe.hgetall(key)
            pipe.hgetall(key + ":steps")
            pipe.lrange(key + ":reruns", 0, -1)
            record, steps, reruns = cast(list[Any], pipe.execute())
        return replies.run_status(record, steps, reruns)

    def run_state(self, run_id: str) -> RunState | None:
        with self._answering():
            state = self._redis.hget(self._key(run_id), "status")
        return cast(RunState, replies.text(state)) if state is not None else None

    def wait_run(
        self,
        run_id: str,
        timeout_s: float | None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus | None:
        with self._answering():
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
            wait_on_channel(
                pubsub,
                self._key(run_id),
                ended=lambda: self.run_state(run_id) in (None, *FINAL_RUN_STATES),
                read=lambda: self.get_run(run_id),
                timeout_s=timeout_s,
                on_change=on_change,
            )
        return self.get_run(run_id)

    def run_feed(self) -> RedisRunFeed:
        with self._answering():  # a Redis Cluster's client is made on first use, which may fail
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        return RedisRunFeed(pubsub, self._key, self._answering)

    def run_continuations(self, run_id: str) -> dict[str, str]:
        with self._answering():
            starts = cast(dict[bytes, bytes], self._redis.hgetall(self._key(run_id) + ":starts"))
        # The first steps are kept there too (for the stall sweep), under the root's id: not a continuation.
        return {replies.text(node): replies.text(leaves) for node, leaves in starts.items() if node != ROOT.encode()}

    def run_first_steps(self, run_id: str) -> tuple[str, str] | None:
        with self._answering():
            leaves = self._redis.hget(self._key(run_id) + ":starts", ROOT)
            given = self._redis.hget(self._key(run_id) + ":inputs", ROOT)
        if leaves is None or given is None:
            return None
        return replies.text(leaves), replies.text(given)

    def step_result(self, run_id: str, node: str, member_of: tuple[str, int] | None = None) -> str | None:
        # Where complete.lua keeps a result: with the barrier of the parallel node a step is a direct
        # member of, else with the chain results.
        with self._answering():
            if member_of is None:
                value = self._redis.hget(self._key(run_id) + ":results", node)
            else:
                value = self._redis.hget(f"{self._key(run_id)}:bar:{member_of[0]}", str(member_of[1]))
        return replies.text(value) if value is not None else None

    def step_logs(self, run_id: str, nodes: Sequence[str]) -> dict[str, tuple[AttemptLog, ...]]:
        if not nodes:
            return {}
        with self._answering():
            found = cast(list[bytes | None], self._redis.hmget(self._key(run_id) + ":logs", list(nodes)))
        return {node: attempt_logs(raw) for node, raw in zip(nodes, found, strict=True) if raw is not None}
