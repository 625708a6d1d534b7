"""The process's long-running window on the real RabbitMQ: no more long jobs taken than threads, whatever
the queue names; nothing handed back unstarted; the worker counted as a reader while every thread is busy,
and again once its readers queue is lost.

About 30 s in all, most of it declaring namespaces and starting workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import dramatiq
from dramatiq.middleware import CurrentMessage

from pipelines.app import App
from pipelines.broker import ExchangeBroker
from pipelines.broker.rabbitmq.delivery import Delivery
from pipelines.wire.naming import readers_queue
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, StartWorker

pytestmark = only_on("rabbitmq")

TIMEOUT_S = 30
JOBS_PER_ACTOR = 4


class Jobs:
    """Long-running jobs that each hold their thread until the test lets one go."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int, bool]] = []
        """(actor, job, redelivered) in start order."""
        self.finished = 0
        self._gate = threading.Semaphore(0)
        self._changed = threading.Condition()

    def run(self, actor: str, job: int) -> None:
        message = CurrentMessage.get_current_message()
        assert isinstance(message, Delivery)
        with self._changed:
            self.started.append((actor, job, message.redelivered))
            self._changed.notify_all()
        assert self._gate.acquire(timeout=TIMEOUT_S), "the test never let this job end"
        with self._changed:
            self.finished += 1
            self._changed.notify_all()

    def let_one_end(self) -> None:
        self._gate.release()

    def wait_started(self, count: int) -> None:
        self._wait(lambda: len(self.started) == count, f"{count} jobs to start")

    def wait_finished(self, count: int) -> None:
        self._wait(lambda: self.finished == count, f"{count} jobs to end")

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        with self._changed:
            assert self._changed.wait_for(done, TIMEOUT_S), f"timed out waiting for {what}: {self.started}"


def long_running_app(make_app: MakeApp, queue_names: dict[str, str]) -> tuple[App, ExchangeBroker, Jobs]:
    """An app with one long-running actor per entry of ``queue_names`` (actor → its queue name), each
    sent JOBS_PER_ACTOR jobs before any worker runs."""
    app: App = make_app()
    broker = app.broker
    assert isinstance(broker, ExchangeBroker)
    broker.add_middleware(CurrentMessage())
    jobs = Jobs()
    for name, queue_name in queue_names.items():
        actor = dramatiq.actor(
            actor_name=name, queue_name=queue_name, broker=broker, profile="long_running", lease_s=5, max_retries=0
        )(lambda job, name=name: jobs.run(name, job))
        for job in range(JOBS_PER_ACTOR):
            actor.send(job)
    return app, broker, jobs


def test_a_process_takes_no_more_long_jobs_than_its_threads_across_its_queue_names(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app, broker, jobs = long_running_app(make_app, {"export": "long_running", "render": "renders"})
    queues = [broker.topology.actor_queues[name] for name in ("export", "render")]
    total = 2 * JOBS_PER_ACTOR
    threads = 2

    start_worker(app, threads=threads)
    taken_beyond_threads: list[int] = []
    for ended in range(total):
        jobs.wait_started(min(total, ended + threads))  # every thread runs a job
        # Read in this order, "taken" can only be over-counted: messages out of their queues, not ended.
        ready = sum(broker.queue_depth(queue) or 0 for queue in queues)
        taken = total - ready - jobs.finished
        taken_beyond_threads.append(taken - threads)
        jobs.let_one_end()
        jobs.wait_finished(ended + 1)

    assert max(taken_beyond_threads) <= 0, taken_beyond_threads
    assert sorted((actor, job) for actor, job, _ in jobs.started) == sorted(
        (actor, job) for actor in ("export", "render") for job in range(JOBS_PER_ACTOR)
    )


def test_long_running_queues_of_one_queue_name_take_turns_and_no_job_is_handed_back_unstarted(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app, _, jobs = long_running_app(make_app, {"export": "long_running", "render": "long_running"})

    start_worker(app, threads=1)
    for ended in range(2 * JOBS_PER_ACTOR):
        jobs.wait_started(ended + 1)
        jobs.let_one_end()

    jobs.wait_finished(2 * JOBS_PER_ACTOR)
    # A message returned to its queue unstarted would come back redelivered (and count as an attempt).
    assert [redelivered for _, _, redelivered in jobs.started] == [False] * 2 * JOBS_PER_ACTOR
    # With a backlog in both, neither queue waits for the other to be empty.
    assert [actor for actor, _, _ in jobs.started] == ["export", "render"] * JOBS_PER_ACTOR


def test_a_worker_whose_threads_all_run_long_jobs_still_counts_as_the_reader_of_their_queue(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app, broker, jobs = long_running_app(make_app, {"export": "long_running"})
    queue = broker.topology.actor_queues["export"]
    assert broker.queue_consumers(queue) == 0  # no worker yet: `pipelines queues` says "no consumer"

    worker = start_worker(app, threads=1)
    jobs.wait_started(1)  # the only thread runs a job

    # Read by the worker, though it takes nothing now (awaited: a consumer that restarts is counted
    # twice until RabbitMQ has closed the old one's connection).
    await_consumers(broker, queue, 1)
    assert broker.queue_depth(queue) == JOBS_PER_ACTOR - 1
    for _ in range(JOBS_PER_ACTOR):
        jobs.let_one_end()
    jobs.wait_finished(JOBS_PER_ACTOR)
    worker.stop()
    await_consumers(broker, queue, 0)


def test_a_reader_whose_readers_queue_is_deleted_announces_itself_again(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app, broker, jobs = long_running_app(make_app, {"export": "long_running"})
    queue = broker.topology.actor_queues["export"]
    start_worker(app, threads=1)
    jobs.wait_started(1)
    await_consumers(broker, queue, 1)

    # What a cluster does to a classic queue whose node is lost: gone, and its consumers cancelled.
    broker.thread_connections.on_channel(lambda channel: channel.queue_delete(readers_queue(queue)))

    await_consumers(broker, queue, 1)
    for _ in range(JOBS_PER_ACTOR):
        jobs.let_one_end()
    jobs.wait_finished(JOBS_PER_ACTOR)


def await_consumers(broker: ExchangeBroker, queue: str, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while broker.queue_consumers(queue) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert broker.queue_consumers(queue) == count
