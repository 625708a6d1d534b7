"""Local steps on every backend: a chain's next step runs in the worker where the step before it finished,
not published, unless it must go through RabbitMQ; a cancel or a passed deadline still stops the chain."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import dramatiq
import pytest

from pipelines import HIGH_PRIORITY, chain, fan_out
from pipelines.app import App
from pipelines.context import current_message
from pipelines.flow.local_steps import LOCAL_WAIT_LIMIT_S
from pipelines.testing import boot
from tests.support.backends import only_on
from tests.support.broker_witness import PublishCounts
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


def declare(app: App, calls: Counter[str], **next_options: Any) -> tuple[dramatiq.Actor[Any, Any], ...]:
    """``first`` then ``second`` (declared with ``next_options``) then ``third``, each counting its calls."""
    lock = threading.Lock()

    def count(name: str) -> None:
        with lock:
            calls[name] += 1

    @dramatiq.actor(broker=app.broker)
    def first(x: int) -> int:
        count("first")
        return x + 1

    @dramatiq.actor(broker=app.broker, **next_options)
    def second(x: int) -> int:
        count("second")
        return x * 2

    @dramatiq.actor(broker=app.broker)
    def third(x: int) -> int:
        count("third")
        return x - 3

    return first, second, third


def test_a_chains_later_steps_run_where_the_first_finished_and_are_never_published(
    make_app: MakeApp, start_worker: StartWorker, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    calls: Counter[str] = Counter()
    first, second, third = declare(app, calls)
    start_worker(app)
    published = publishes(app)

    run = app.start(chain(first, second, third), args=(4,))

    assert run.result(timeout_s=TIMEOUT_S) == 7
    assert published.count("work") == 1  # the first step only
    assert calls == Counter({"first": 1, "second": 1, "third": 1})
    assert [s.state for s in run.status().steps] == ["succeeded"] * 3


def test_with_local_steps_off_every_step_is_published(
    make_app: MakeApp, start_worker: StartWorker, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections, worker={"local_steps": False})
    first, second, third = declare(app, Counter())
    start_worker(app)
    published = publishes(app)

    assert app.start(chain(first, second, third), args=(4,)).result(timeout_s=TIMEOUT_S) == 7
    assert published.count("work") == 3


@pytest.mark.parametrize(
    "options",
    [
        {"local_steps": False},
        {"profile": "ordered", "ordering_key": "x"},
        {"profile": "fire_and_forget"},
        {"rate_limit": "1000/s"},
        {"priority": HIGH_PRIORITY},
    ],
    ids=lambda options: "-".join(map(str, options.values())),
)
def test_a_step_that_must_go_through_rabbitmq_is_published(
    make_app: MakeApp, start_worker: StartWorker, publishes: PublishCounts, options: dict[str, Any]
) -> None:
    app = make_app(**publishes.sections)
    first, second, third = declare(app, Counter(), **options)
    start_worker(app)
    published = publishes(app)

    assert app.start(chain(first, second, third), args=(4,)).result(timeout_s=TIMEOUT_S) == 7
    assert published.count("work") == 2  # the first, and the step of the special actor: the third runs here


@only_on("rabbitmq")  # the embedded broker counts the watchdog of a long-running job as a publish too
def test_a_long_running_step_is_published(
    make_app: MakeApp, start_worker: StartWorker, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    first, second, third = declare(app, Counter(), profile="long_running", lease_s=5)
    start_worker(app)
    published = publishes(app)

    assert app.start(chain(first, second, third), args=(4,)).result(timeout_s=TIMEOUT_S) == 7
    assert published.count("work") == 2


def test_a_step_of_an_actor_whose_queue_this_worker_does_not_read_is_published(
    make_app: MakeApp, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    first, second, third = declare(app, Counter(), queue_name="elsewhere")
    boot(app)
    workers = [dramatiq.Worker(app.broker, queues={queue}, worker_threads=2) for queue in ("default", "elsewhere")]
    for worker in workers:
        worker.start()
    published = publishes(app)
    try:
        assert app.start(chain(first, second, third), args=(4,)).result(timeout_s=TIMEOUT_S) == 7
    finally:
        for worker in workers:
            worker.stop()
    assert published.count("work") == 3  # each worker reads one of the two queues: every hop crosses


def test_a_fan_out_after_a_step_is_one_publish_and_its_branches_are_not_run_here(
    make_app: MakeApp, start_worker: StartWorker, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    calls: Counter[str] = Counter()
    first, second, third = declare(app, calls)
    start_worker(app)
    published = publishes(app)

    run = app.start(chain(first, fan_out(second, third)), args=(4,))

    assert run.result(timeout_s=TIMEOUT_S) == [10, 2]
    assert published.count("work") == 2


def test_a_worker_whose_deliveries_wait_for_a_thread_publishes_the_next_step_instead(
    make_app: MakeApp, start_worker: StartWorker, publishes: PublishCounts
) -> None:
    app = make_app(**publishes.sections)
    _, second, third = declare(app, Counter())

    @dramatiq.actor(broker=app.broker)
    def slow_first(x: int) -> int:
        threading.Event().wait(LOCAL_WAIT_LIMIT_S + 0.1)  # the next chain's first step waits that long
        return x + 1

    published = publishes(app)
    runs = [app.start(chain(slow_first, second, third), args=(n,)) for n in range(3)]
    start_worker(app, threads=1)  # the backlog waits for its one thread

    assert [run.result(timeout_s=TIMEOUT_S) for run in runs] == [2 * (n + 1) - 3 for n in range(3)]
    assert published.count("work") > len(runs)  # next steps published, not run ahead of what waited


def test_a_cancel_between_two_local_steps_stops_the_chain(make_app: MakeApp, start_worker: StartWorker) -> None:
    app = make_app()
    calls: Counter[str] = Counter()
    _, second, third = declare(app, calls)

    @dramatiq.actor(broker=app.broker)
    def cancelling(x: int) -> int:
        running = current_message()
        assert running is not None
        assert running.run_id is not None
        app.get_run(running.run_id).cancel()
        return x

    start_worker(app)
    run = app.start(chain(cancelling, second, third), args=(1,))

    assert run.wait(TIMEOUT_S).state == "cancelled"
    assert calls == Counter()
    assert [s.state for s in run.status().steps][1:] == ["skipped", "skipped"]


def test_a_deadline_that_passes_during_a_step_stops_the_chain_before_the_next(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    calls: Counter[str] = Counter()
    _, second, third = declare(app, calls)
    past = threading.Event()

    @dramatiq.actor(broker=app.broker)
    def outlives(x: int) -> int:
        past.wait(2.0)  # longer than the run's deadline
        return x

    start_worker(app)
    run = app.start(chain(outlives, second, third), args=(1,), deadline_s=1.0)

    status = run.wait(TIMEOUT_S)
    assert (status.state, status.error) == ("failed", "deadline exceeded")
    assert calls == Counter()


@only_on("rabbitmq")
def test_a_chain_step_run_here_keeps_its_correlation_id_and_its_time_limit(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    seen: list[tuple[str | None, str | None]] = []

    @dramatiq.actor(broker=app.broker)
    def head(x: int) -> int:
        return x

    @dramatiq.actor(broker=app.broker, timeout_s=0.5, max_retries=0)
    def tail(x: int) -> int:
        running = current_message()
        seen.append((running.correlation_id if running else None, running.run_id if running else None))
        threading.Event().wait(5)  # past its time limit: interrupted, as a delivered step would be
        return x

    start_worker(app)
    run = app.start(chain(head, tail), args=(1,))

    status = run.wait(TIMEOUT_S)
    assert status.state == "failed"
    assert "TimeLimitExceeded" in (status.error or "")
    assert seen == [(status.correlation_id, run.id)]
    observer.wait_dead_lettered("tail", 1)  # a local step's failure is dead-lettered as a delivery's
    assert [letter.reason.reason for letter in app.dead_letters.list("tail")] == ["retries exhausted"]
