"""Bare Dramatiq side of the benchmark: RabbitmqBroker with its defaults (and group callbacks).

Started as ``dramatiq bench.bare_worker:broker``. ``BENCH_CONFIRM=1`` turns on ``confirm_delivery``.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend

counter: Any = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
broker = RabbitmqBroker(url=os.environ["BENCH_AMQP_URL"], confirm_delivery=os.environ.get("BENCH_CONFIRM") == "1")
broker.add_middleware(GroupCallbacks(RedisBackend(client=counter)))


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def noop(key: str) -> None:
    counter.incr(key)


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def hop(key: str, value: int = 0) -> int:
    return value + 1


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def last(key: str, value: int) -> None:
    counter.incr(key)


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def member(key: str) -> int:
    return 1


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def gather(key: str) -> None:
    counter.incr(key)


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def ping(key: str) -> None:
    counter.lpush(key, b"1")


@dramatiq.actor(broker=broker, queue_name="bench_bare")
def ping_last(key: str, value: int) -> None:
    counter.lpush(key, b"1")
