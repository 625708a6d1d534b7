"""The run store's keyed records on Redis, beside the runs: idempotency keys, once marks, the leases of
long-running jobs, schedule ticks and rate-limit slots.

Each record is a key of its own (named in :mod:`pipelines.wire.naming`), changed by one Lua script or
one command, and decoded by its function in :mod:`pipelines.store.replies`. What worker processes
record (heartbeats, message counts) is in :mod:`pipelines.store.redis_workers`, with what every part of
the Redis store shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from pipelines.store import replies
from pipelines.store.base import KeyClaimKind, LeaseCheck, LeaseOpenKind, SlotTake
from pipelines.store.redis_workers import RedisWorkerRecords
from pipelines.store.scripting import Scripts
from pipelines.wire.naming import (
    idempotency_record_key,
    lease_key,
    once_key,
    run_key,
    schedule_key,
    sweep_key,
    tick_key,
)


class RedisRecords(RedisWorkerRecords):
    """The roles ``KeyClaims``, ``OnceMarks``, ``JobLeases``, ``ScheduleTicks`` and ``RateSlots`` on Redis,
    beside those of :class:`~pipelines.store.redis_workers.RedisWorkerRecords`."""

    def __init__(
        self, *, client: redis.Redis | RedisCluster, scripts: Scripts, url: str, namespace: str, retention_ms: int
    ) -> None:
        super().__init__(client=client, scripts=scripts, url=url, namespace=namespace)
        self._retention_ms = retention_ms
        self._key_claim = scripts.register("key_claim")
        self._key_release = scripts.register("key_release")
        self._key_finish = scripts.register("key_finish")
        self._lease_open = scripts.register("lease_open")
        self._lease_renew = scripts.register("lease_renew")
        self._lease_take = scripts.register("lease_take")
        self._lease_close = scripts.register("lease_close")
        self._tick_claim = scripts.register("tick_claim")
        self._tick_sweep = scripts.register("tick_sweep")
        self._reserve = scripts.register("reserve")
        self._rate_take = scripts.register("rate_take")
        self._key_renew = scripts.register("key_renew")
        self._rerun_link = scripts.register("rerun_link")

    def _run(self, script: Script, keys: list[str], args: list[Any], *, replicated: bool = False) -> Any:
        """``script``'s raw reply (for its decoder in :mod:`~pipelines.store.replies`); a ``replicated``
        one waits for replicas where the store does."""
        with self._answering():
            return self._scripts.run(script, keys, args, replicated=replicated)

    def _idempotency_key(self, key: str) -> str:
        return idempotency_record_key(self._namespace, key)

    def claim_key(self, key: str, *, holder: str, lease_ms: int) -> tuple[KeyClaimKind, int]:
        return replies.key_claim(self._run(self._key_claim, [self._idempotency_key(key)], [holder, lease_ms]))

    def finish_key(self, key: str, *, retention_s: int) -> None:
        # A script, not a SET: it is sent with the step's other writes and waits for replicas as they do.
        replies.key_finish(self._run(self._key_finish, [self._idempotency_key(key)], [retention_s], replicated=True))

    def release_key(self, key: str, *, holder: str) -> None:
        replies.key_release(self._run(self._key_release, [self._idempotency_key(key)], [holder]))

    def mark_once(self, key: str, *, retention_s: int) -> bool:
        with self._answering():
            return bool(self._redis.set(once_key(self._namespace, key), "1", nx=True, ex=retention_s))

    def forget_once(self, key: str) -> None:
        with self._answering():
            self._redis.delete(once_key(self._namespace, key))

    def is_marked(self, key: str) -> bool:
        with self._answering():
            return bool(self._redis.exists(once_key(self._namespace, key)))

    def _lease(self, lease_id: str) -> str:
        return lease_key(self._namespace, lease_id)

    def open_lease(self, lease_id: str, *, holder: str, lease_ms: int, record: str) -> LeaseOpenKind:
        args = [holder, lease_ms, record, self._retention_ms]
        return replies.lease_open(self._run(self._lease_open, [self._lease(lease_id)], args))

    def renew_leases(self, holders: Mapping[str, str], *, lease_ms: int) -> list[str]:
        ids = list(holders)
        if not ids:
            return []

        # One script per lease (each atomic), all in one round trip: leases are in different Redis
        # Cluster slots, which one script may not span.
        def fill(pipe: Any) -> None:
            for lease_id in ids:
                self._scripts.queue(pipe, self._lease_renew, [self._lease(lease_id)], [lease_ms, holders[lease_id]])

        with self._answering():
            replies_by_lease = self._scripts.execute(fill)
        return [lost for lost, reply in zip(ids, replies_by_lease, strict=True) if replies.lease_renew(reply, [lost])]

    def close_lease(self, lease_id: str) -> None:
        replies.lease_close(self._run(self._lease_close, [self._lease(lease_id)], []))

    def take_expired_lease(self, lease_id: str) -> LeaseCheck:
        return replies.lease_take(self._run(self._lease_take, [self._lease(lease_id)], []))

    def claim_tick(self, job: str, tick_ms: int, *, retention_s: int) -> bool:
        keys = [tick_key(self._namespace, job, tick_ms), schedule_key(self._namespace, job), self._swept(job)]
        return replies.tick_claim(self._run(self._tick_claim, keys, [tick_ms, retention_s * 1000]))

    def last_tick(self, job: str) -> int | None:
        with self._answering():
            value = self._redis.get(schedule_key(self._namespace, job))
        return int(value) if value is not None else None

    def tick_claims(self, job: str, tick_ms: int) -> int:
        with self._answering():
            value = self._redis.get(tick_key(self._namespace, job, tick_ms))
        return int(value) if value is not None else 0

    def swept_through(self, job: str) -> int | None:
        with self._answering():
            value = self._redis.get(self._swept(job))
        return int(value) if value is not None else None

    def sweep_ticks(self, job: str, ticks: Sequence[int], *, cutoff_ms: int, through_ms: int) -> list[int]:
        keys = [self._swept(job), *(tick_key(self._namespace, job, tick) for tick in ticks)]
        return replies.tick_sweep(self._run(self._tick_sweep, keys, [cutoff_ms, through_ms, *ticks]))

    def _swept(self, job: str) -> str:
        return sweep_key(self._namespace, job)

    def _rate_key(self, key: str) -> str:
        # The limit's key is a hash tag: its next slot and its latest runs share one Redis Cluster slot.
        return f"{self._namespace}:{{{key}}}"

    def reserve_slots(self, key: str, *, count: int, interval_ms: int) -> list[int]:
        return replies.reserve(self._run(self._reserve, [self._rate_key(key)], [count, interval_ms]))

    def take_slot(
        self, key: str, *, interval_ms: int, window_count: int, window_ms: int, held_ms: int, grace_ms: int
    ) -> SlotTake:
        keys = [self._rate_key(key), f"{self._rate_key(key)}:runs"]
        args = [interval_ms, window_count, window_ms, held_ms, grace_ms]
        return replies.rate_take(self._run(self._rate_take, keys, args))

    def link_rerun(self, run_id: str, rerun_id: str) -> None:
        # Beside the records: the link is a key of its own that extends the original run's key.
        replies.rerun_link(self._run(self._rerun_link, [run_key(self._namespace, run_id)], [rerun_id], replicated=True))
