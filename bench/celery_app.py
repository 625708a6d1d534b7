"""Celery side of the benchmark: RabbitMQ broker, Redis result backend (chords need one).

Started as ``celery -A bench.celery_app worker -P threads -c 8`` (twice: two worker processes).
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery

counter: Any = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
amqp = os.environ["BENCH_AMQP_URL"].replace("%2F", "/")
app = Celery("bench", broker=amqp.replace("amqp://", "pyamqp://"), backend=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_default_queue="bench_celery",
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task
def noop(key: str) -> None:
    counter.incr(key)


@app.task
def hop(value: int, key: str) -> int:
    return value + 1


@app.task
def last(value: int, key: str) -> None:
    counter.incr(key)


@app.task(ignore_result=False)
def member(key: str) -> int:
    return 1


@app.task
def gather(values: list[int], key: str) -> None:
    counter.incr(key)


@app.task
def ping(key: str) -> None:
    counter.lpush(key, b"1")


@app.task
def ping_last(value: int, key: str) -> None:
    counter.lpush(key, b"1")
