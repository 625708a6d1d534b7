"""Rate limits hold where messages are consumed: a backlog, a replay or a producer that does not pace."""

from __future__ import annotations

import threading
import time
from typing import Any

import dramatiq
import pytest

from pipelines import step
from pipelines.broker import ExchangeBroker
from pipelines.wire.rates import parse_rate
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, StartWorker

rabbitmq_only = only_on("rabbitmq")

RATE = 20
BACKLOG = 200


class Started:
    """When each message reached the actor, awaited by count."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._ran = threading.Condition()

    def record(self) -> None:
        with self._ran:
            self.times.append(time.time())
            self._ran.notify_all()

    def wait(self, count: int) -> None:
        with self._ran:
            assert self._ran.wait_for(lambda: len(self.times) >= count, 60), f"only {len(self.times)} of {count} ran"


def await_depth(app: Any, actor_name: str, depth: int) -> None:
    """Until the actor's queue holds ``depth`` messages (all back from the delay queues)."""
    queue = app.broker.topology.actor_queues[actor_name]
    deadline = time.monotonic() + 30
    while app.broker.queue_depth(queue) != depth:
        assert time.monotonic() < deadline, f"{queue} did not reach {depth} messages"
        time.sleep(0.1)  # RabbitMQ's queue depth: nothing to subscribe to


def busiest_window(started: list[float], width_s: float = 1.0) -> int:
    """The most timestamps in any window ``[t, t + width_s)`` that starts at one of them."""
    ordered = sorted(started)
    end = 0
    most = 0
    for begin, t in enumerate(ordered):
        while end < len(ordered) and ordered[end] < t + width_s:
            end += 1
        most = max(most, end - begin)
    return most


@rabbitmq_only
def test_a_backlog_queued_while_no_worker_ran_reaches_the_actor_at_its_rate(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    # Another producer in the same namespace that does not pace (an older deploy, a replay, a script):
    # its messages are due at once, so only the worker can hold the limit.
    producer = make_app(namespace=app.settings.namespace)
    assert isinstance(producer.broker, ExchangeBroker)
    started = Started()

    @dramatiq.actor(broker=app.broker, actor_name="call_partner_api", rate_limit=f"{RATE}/s")
    def call_partner_api(n: int) -> None:
        started.record()

    unpaced = dramatiq.actor(broker=producer.broker, actor_name="call_partner_api")(lambda n: None)
    producer.broker.enqueue_many([unpaced.message(n) for n in range(BACKLOG)])
    assert producer.broker.queue_depth(producer.broker.topology.actor_queues["call_partner_api"]) == BACKLOG

    start_worker(app, threads=8)
    started.wait(BACKLOG)

    busiest = busiest_window(started.times)
    duration = max(started.times) - min(started.times)
    print(f"\nrate limit {RATE}/s, backlog of {BACKLOG}: most in any 1 s window {busiest}, all in {duration:.2f} s")
    assert len(started.times) == BACKLOG  # none twice
    assert busiest <= RATE + 1


@rabbitmq_only
def test_paced_messages_whose_slots_passed_while_no_worker_ran_are_paced_again(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    started = Started()

    @dramatiq.actor(broker=app.broker, rate_limit=f"{RATE}/s")
    def call_partner_api(n: int) -> None:
        started.record()

    sent = 2 * RATE
    app.broker.enqueue_many([call_partner_api.message(n) for n in range(sent)])  # slots over 2 s
    await_depth(app, "call_partner_api", sent)  # every slot passed

    start_worker(app, threads=8)
    started.wait(sent)

    busiest = busiest_window(started.times)
    print(f"\nrate limit {RATE}/s, {sent} paced messages due at once: most in any 1 s window {busiest}")
    assert busiest <= RATE + 1


@rabbitmq_only
def test_runs_of_a_rate_limited_pipeline_started_while_no_worker_ran_start_at_its_rate(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    started = Started()

    @dramatiq.actor(broker=app.broker)
    def sync_account(n: int) -> None:
        started.record()

    app.register("sync", step(sync_account), rate_limit=f"{RATE}/s")
    runs = [app.run("sync", n) for n in range(2 * RATE)]  # starts paced over 2 s
    await_depth(app, "sync_account", len(runs))  # every start's slot passed

    start_worker(app, threads=8)
    assert all(run.wait(timeout_s=60).state == "succeeded" for run in runs)

    busiest = busiest_window(started.times)
    print(f"\npipeline rate limit {RATE}/s, {len(runs)} starts due at once: most in any 1 s window {busiest}")
    assert busiest <= RATE + 1


@pytest.mark.parametrize(
    ("text", "window"),
    [("20/s", (20, 1000)), ("10/m", (10, 60_000)), ("2.5/s", (2, 800)), ("0.5/s", (1, 2000)), ("5/h", (5, 3_600_000))],
)
def test_the_bound_counts_the_whole_messages_of_a_period_in_as_long_as_they_take_at_the_rate(
    text: str, window: tuple[int, int]
) -> None:
    rate = parse_rate(text, owner="Actor 'a'")

    assert (rate.window_count, rate.window_ms) == window
