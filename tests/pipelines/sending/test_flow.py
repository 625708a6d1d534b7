"""Flow control: priorities, full queues that refuse, rate limits, batches and oversized messages."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from unittest import mock

import dramatiq
import pytest

from pipelines import HIGH_PRIORITY, LOW_PRIORITY, for_each, step
from pipelines import options as opt
from pipelines.broker import ExchangeBroker
from pipelines.broker.rabbitmq.confirms import ConfirmPublisher
from pipelines.errors import MessageTooLarge, QueueFull
from tests.pipelines.rate_limits.test_rate_limits import busiest_window
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, Observe, StartWorker

rabbitmq_only = only_on("rabbitmq")


@rabbitmq_only
def test_high_priority_messages_enqueued_behind_5000_low_ones_finish_first(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    done: list[str] = []
    lock = threading.Lock()

    @dramatiq.actor(broker=app.broker, priority=LOW_PRIORITY)
    def newsletter(n: int) -> None:
        with lock:
            done.append("low")

    @dramatiq.actor(broker=app.broker, priority=HIGH_PRIORITY)
    def password_reset(n: int) -> None:
        with lock:
            done.append("high")

    for start in range(0, 5000, 1000):
        app.broker.enqueue_many([newsletter.message(n) for n in range(start, start + 1000)])
    app.broker.enqueue_many([password_reset.message(n) for n in range(20)])
    start_worker(app, threads=4)
    observer.wait_handled("password_reset", 20, timeout_s=60)

    with lock:
        low_before_last_high = done[: len(done) - done[::-1].index("high")].count("low")
    print(f"\npriorities: 20 high behind 5,000 low: {low_before_last_high} low finished before the last high")
    # Only what the worker held in memory while the high ones arrived, window by window (prefetch is
    # 2 x threads per queue): a few dozen at most, against 5,000 in a first-come first-served order.
    assert low_before_last_high <= 50


@rabbitmq_only
def test_a_full_queue_refuses_the_publish_naming_the_queue_and_its_depth(make_app: MakeApp) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)

    @dramatiq.actor(broker=app.broker, max_length=3)
    def resize(image: int) -> None: ...

    def fill() -> int:
        for n in range(10):
            resize.send(n)
        return 10

    accepted = 0
    with pytest.raises(QueueFull, match=r"Queue \S+\.default\.resize is full \(\d+ messages, max_length 3\)") as full:
        accepted = fill()
    accepted = app.broker.queue_depth(full.value.queue) or 0

    # A quorum queue checks its limit before each enqueue, so it may end one message over it.
    assert accepted in (3, 4)
    assert (full.value.queue, full.value.depth) == (app.broker.topology.actor_queues["resize"], accepted)


def test_a_rate_limit_spaces_messages_by_their_reserved_slots(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    started: list[float] = []

    @dramatiq.actor(broker=app.broker, rate_limit="20/s")
    def call_partner_api(n: int) -> None:
        started.append(time.time())

    sent = app.broker.enqueue_many([call_partner_api.message(n) for n in range(30)])
    start_worker(app)
    observer.wait_handled("call_partner_api", 30, timeout_s=30)

    etas = [m.options.get(opt.ETA, 0) for m in sent]
    gaps = [b - a for a, b in itertools.pairwise(etas[1:])]
    busiest = busiest_window(started)
    print(f"\nrate limit 20/s: 30 messages; most started in any 1 s window: {busiest}")
    assert opt.ETA not in sent[0].options  # the first slot is now
    assert all(gap >= 50 for gap in gaps)  # one slot every 50 ms, never closer
    assert busiest <= 20 + 1  # the worker's bound (see docs/guides/schedules-and-rate-limits.md)


@rabbitmq_only
def test_a_map_of_10000_is_published_in_one_confirm_batch(make_app: MakeApp, monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)

    @dramatiq.actor(broker=app.broker)
    def square(n: int) -> int:
        return n * n

    app.broker.ensure_topology()
    with mock.patch.object(ConfirmPublisher, "publish", autospec=True, side_effect=ConfirmPublisher.publish) as spy:
        app.start(for_each(square, range(10_000)))

    assert spy.call_count == 1
    assert len(spy.call_args.args[1]) == 10_000
    assert app.broker.queue_depth(app.broker.topology.actor_queues["square"]) == 10_000


def test_a_large_message_is_a_warning_or_by_policy_an_error(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    warn = make_app(broker={"warn_message_bytes": 1000})
    strict = make_app(broker={"warn_message_bytes": 1000, "large_message_policy": "error"})
    for app in (warn, strict):
        dramatiq.actor(broker=app.broker, actor_name="render")(lambda html: None)

    with caplog.at_level(logging.WARNING, logger="pipelines.sending.outbound"):
        warn.broker.get_actor("render").send("x" * 2000)
        warn.broker.get_actor("render").send("x" * 2000)
    with pytest.raises(MessageTooLarge, match=r"over broker.warn_message_bytes = 1000: pass ids, not objects"):
        strict.broker.get_actor("render").send("x" * 2000)

    warnings = [r.getMessage() for r in caplog.records if "pass ids, not objects" in r.getMessage()]
    assert len(warnings) == 1  # once per actor, not once per message
    assert "'render' is 2" in warnings[0]


def test_a_pipeline_rate_limit_spaces_the_starts_of_its_runs(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    started: list[float] = []

    @dramatiq.actor(broker=app.broker)
    def sync_account(n: int) -> None:
        started.append(time.time())

    app.register("sync", step(sync_account), rate_limit="10/s")
    runs = [app.run("sync", n) for n in range(15)]
    start_worker(app)
    observer.wait_handled("sync_account", 15, timeout_s=30)

    busiest = busiest_window(started)
    print(f"\npipeline rate limit 10/s: 15 starts; most started in any 1 s window: {busiest}")
    assert all(run.wait(timeout_s=10).state == "succeeded" for run in runs)
    assert busiest <= 10 + 1  # as for actors
