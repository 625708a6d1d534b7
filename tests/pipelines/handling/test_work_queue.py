"""A local step is queued for the thread that finished the step before it: ahead of every delivery, and
without waking a thread that waits for work (it would find the step taken)."""

from __future__ import annotations

import threading
import time
from queue import Empty

import dramatiq
from dramatiq.brokers.stub import StubBroker

from pipelines.handling.proxy import WorkQueue

TIMEOUT_S = 10


def waiting_for_work(queue: object) -> int:
    """How many threads wait on the work queue's condition (CPython keeps one lock each)."""
    return len(queue.not_empty._waiters)  # type: ignore[attr-defined]


def test_a_local_step_goes_first_and_wakes_no_idle_thread() -> None:
    broker = StubBroker()
    worker = dramatiq.Worker(broker, worker_threads=1)
    work = WorkQueue(worker)
    queue = worker.work_queue
    delivered = dramatiq.broker.MessageProxy(dramatiq.Message("q", "delivered", (), {}, {}))
    local = dramatiq.broker.MessageProxy(dramatiq.Message("q", "local", (), {}, {}))
    taken: list[str] = []

    def idle() -> None:
        try:
            taken.append(queue.get(timeout=TIMEOUT_S).message.actor_name)
        except Empty:
            taken.append("nothing")

    waiter = threading.Thread(target=idle)
    waiter.start()
    while waiting_for_work(queue) != 1:  # the idle thread is in its wait
        time.sleep(0.001)

    work.put_first(local)
    assert waiting_for_work(queue) == 1  # not notified: still waiting
    queue.put(dramatiq.worker._WorkQueueItem(0, delivered))  # a delivery wakes it, and it takes the first
    waiter.join(TIMEOUT_S)
    assert taken == ["local"]
    assert queue.get_nowait().message is delivered
