"""Raw pika side of the benchmark: the floor under every framework (``python -m bench.pika_worker``).

Each process consumes the queue with a prefetch of twice the thread count, counts in Redis like the
frameworks' no-op actors do, and acknowledges each message.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import pika
import redis

QUEUE = "bench_raw"


def consume(prefetch: int) -> None:
    counter: Any = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    connection = pika.BlockingConnection(pika.URLParameters(os.environ["BENCH_AMQP_URL"]))
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.basic_qos(prefetch_count=prefetch)

    def handle(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        counter.incr(body)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(QUEUE, handle)
    channel.start_consuming()


def main() -> None:
    processes = int(os.environ.get("BENCH_PROCESSES", "2"))
    prefetch = 2 * int(os.environ.get("BENCH_THREADS", "8"))
    workers = [multiprocessing.Process(target=consume, args=(prefetch,)) for _ in range(processes)]
    for worker in workers:
        worker.start()

    def stop(*_: object) -> None:
        for worker in workers:
            worker.terminate()

    signal.signal(signal.SIGTERM, stop)
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
