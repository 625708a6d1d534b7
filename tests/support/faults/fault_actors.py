"""Actors for the fault suite, and the ledger they write every side effect to.

``declare(broker)`` declares them on a broker (the test's producer app, or the worker's); the ledger
is a Redis hash per kind, keyed by item, so the test can tell lost from done and once from twice.
"""

from __future__ import annotations

import os
import time
from typing import Any

import dramatiq
import redis

from pipelines import current_effect_key, report_progress

#: Redis holding the ledger (not the run store's keys: its own prefix).
LEDGER_URL = os.environ.get("FAULT_LEDGER_URL", "redis://127.0.0.1:6379/15")
#: Seconds each unit of work takes, so that kills land while messages are in flight.
WORK_S = float(os.environ.get("FAULT_WORK_S", "0.01"))


class Ledger:
    """Side effects by item: executions (every run of the body) and effects (applied once per key)."""

    def __init__(self, namespace: str) -> None:
        self.redis: Any = redis.Redis.from_url(LEDGER_URL)
        self.prefix = f"{namespace}:ledger"

    def executed(self, kind: str, item: str) -> None:
        self.redis.hincrby(f"{self.prefix}:{kind}:executions", item, 1)

    def apply(self, kind: str, item: str, value: str = "1") -> None:
        """An idempotent effect: the first write per item wins (a unique key, as a careful actor does)."""
        self.redis.hsetnx(f"{self.prefix}:{kind}:effects", item, value)

    def apply_keyed(self, kind: str, item: str) -> None:
        """An effect keyed by ``current_effect_key()`` as the docs show (the first write per effect key wins),
        with every attempt at it counted: two attempts show as 2 in ``applied``, two effect keys for one
        item as 2 in ``keyed_effects``."""
        self.redis.hincrby(f"{self.prefix}:{kind}:applied", item, 1)
        self.redis.hsetnx(f"{self.prefix}:{kind}:keyed", current_effect_key(), item)

    def keyed_effects(self, kind: str) -> dict[str, int]:
        """How many effect keys each item's effect was written under (1: once, whatever ran twice)."""
        items = [v.decode() for v in self.redis.hvals(f"{self.prefix}:{kind}:keyed")]
        return {item: items.count(item) for item in set(items)}

    def append(self, kind: str, key: str, value: int) -> None:
        """An effect whose order matters: appended to the key's list."""
        self.redis.rpush(f"{self.prefix}:{kind}:list:{key}", value)

    def sequence(self, kind: str, key: str) -> list[int]:
        return [int(v) for v in self.redis.lrange(f"{self.prefix}:{kind}:list:{key}", 0, -1)]

    def count(self, kind: str, what: str) -> dict[str, int]:
        raw = self.redis.hgetall(f"{self.prefix}:{kind}:{what}")
        return {k.decode(): int(v) if v.isdigit() else 1 for k, v in raw.items()}

    def values(self, kind: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.redis.hgetall(f"{self.prefix}:{kind}:effects").items()}

    def clear(self) -> None:
        for key in self.redis.scan_iter(match=f"{self.prefix}:*"):
            self.redis.delete(key)


def declare(broker: Any, namespace: str) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Declare the fault suite's actors on ``broker``."""
    ledger = Ledger(namespace)

    @dramatiq.actor(broker=broker, idempotency_key=lambda item: f"item-{item}", max_retries=5, min_backoff=50)
    def work(item: str) -> None:
        ledger.executed("work", item)
        time.sleep(WORK_S)
        ledger.apply("work", item)

    @dramatiq.actor(broker=broker, max_retries=5, min_backoff=50)
    def chain_step(tag: str, value: int) -> int:
        ledger.executed("chain", f"{tag}:{value}")
        time.sleep(WORK_S)
        ledger.apply("chain", f"{tag}:{value}")
        return value + 1

    @dramatiq.actor(broker=broker, max_retries=5, min_backoff=50)
    def member(index: int) -> int:
        time.sleep(WORK_S)
        return index

    @dramatiq.actor(broker=broker, max_retries=5, min_backoff=50)
    def gather(chord_id: str, results: list[int]) -> None:
        ledger.executed("gather", chord_id)
        ledger.apply("gather", chord_id, ",".join(map(str, results)))

    @dramatiq.actor(broker=broker, idempotency_key=lambda item, **_: f"slow-{item}", timeout_s=30, max_retries=5)
    def slow(item: str, seconds: float) -> None:
        ledger.executed("slow", item)
        time.sleep(seconds)
        ledger.apply("slow", item)
        ledger.apply_keyed("slow", item)

    @dramatiq.actor(broker=broker, max_retries=5)
    def hold(tag: str, seconds: float, *received: Any) -> str:
        """A step that takes ``seconds``; its result names the process that ran it to the end."""
        ledger.executed("hold", tag)
        time.sleep(seconds)
        ledger.apply("hold", tag, str(os.getpid()))
        return f"{tag}@{os.getpid()}"

    @dramatiq.actor(broker=broker)
    def poison() -> None:
        os.kill(os.getpid(), 9)  # crashes its worker every time it is delivered

    @dramatiq.actor(broker=broker, profile="ordered", ordering_key="user", partitions=8, max_retries=1)
    def timeline(user: str, seq: int) -> None:
        time.sleep(WORK_S)
        ledger.append("timeline", user, seq)

    def long_job(kind: str, item: str, seconds: float) -> None:
        """``seconds`` of work, reporting progress every 0.1 s, then its effect."""
        ledger.executed(kind, item)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            report_progress(1 - (deadline - time.monotonic()) / seconds, item)
            time.sleep(0.1)
        ledger.apply(kind, item)

    @dramatiq.actor(broker=broker, profile="long_running", lease_s=2, timeout_s=120, max_retries=3)
    def transcode(video: str, seconds: float) -> str:
        long_job("transcode", video, seconds)
        return video

    @dramatiq.actor(broker=broker, profile="long_running", lease_s=2, timeout_s=120, on_lost="fail")
    def backup(volume: str, seconds: float) -> None:
        long_job("backup", volume, seconds)

    return {
        "work": work,
        "chain_step": chain_step,
        "member": member,
        "gather": gather,
        "poison": poison,
        "slow": slow,
        "hold": hold,
        "timeline": timeline,
        "transcode": transcode,
        "backup": backup,
    }
