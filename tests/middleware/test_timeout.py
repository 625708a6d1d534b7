"""Timeouts per actor, refused when longer than RabbitMQ's consumer timeout; run-wide deadlines."""

from __future__ import annotations

import threading
import time

import dramatiq
import pytest

from pipelines import chain
from pipelines.dead_letters.reasons import DeadLetterReason
from pipelines.middleware import TimeoutTooLong
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


def test_an_actor_over_its_timeout_is_stopped_retried_and_then_dead_lettered(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    attempts: list[float] = []

    @dramatiq.actor(broker=app.broker, timeout_s=0.2, max_retries=1, min_backoff=1, max_backoff=2)
    def crunch() -> None:
        attempts.append(time.monotonic())
        while True:  # the time limit interrupts Python code between bytecodes
            time.sleep(0.01)

    start_worker(app)
    crunch.send()
    observer.wait_dead_lettered("crunch", 1)

    letters = app.dead_letters.list("crunch")
    assert len(attempts) == 2
    assert [letter.reason.reason for letter in letters] == ["retries exhausted"]
    assert letters[0].reason.error_type == "TimeLimitExceeded"
    assert letters[0].reason.error is not None
    assert "ran past its time limit of 0.2 s (timeout_s" in letters[0].reason.error
    assert letters[0].reason.attempts == 2


def test_a_timed_out_message_replayed_after_its_actors_timeout_was_raised_runs_under_the_new_one(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    finished: list[int] = []

    @dramatiq.actor(broker=app.broker, timeout_s=0.2, max_retries=0)
    def crunch(n: int) -> None:
        until = time.monotonic() + 2  # past 0.2 s and the limit's checks, one a second
        while time.monotonic() < until:  # Python code, which the time limit interrupts
            time.sleep(0.01)
        finished.append(n)

    start_worker(app)
    crunch.send(1)
    observer.wait_dead_lettered("crunch", 1)
    [letter] = app.dead_letters.list("crunch")
    assert letter.reason.error_type == "TimeLimitExceeded"
    assert letter.message is not None
    assert "time_limit" not in letter.message.options  # the limit of its time is not carried on

    crunch.options["timeout_s"] = 5  # as a deploy that raised it would declare it
    assert app.dead_letters.replay(letter.id) == "replayed"
    observer.wait_handled("crunch", 2)

    assert finished == [1]


def test_a_timeout_longer_than_the_consumer_timeout_is_refused_with_advice(make_app: MakeApp) -> None:
    app = make_app(broker={"consumer_timeout_s": 60})

    with pytest.raises(TimeoutTooLong, match=r"'transcode' may run 3600 s, longer than the broker's consumer timeout"):
        dramatiq.actor(actor_name="transcode", broker=app.broker, timeout_s=3600)(lambda: None)
    with pytest.raises(TimeoutTooLong, match="Split the work into shorter steps"):
        dramatiq.actor(actor_name="export", broker=app.broker, time_limit=120_000)(lambda: None)
    dramatiq.actor(actor_name="quick", broker=app.broker, timeout_s=59)(lambda: None)


def test_a_run_past_its_deadline_starts_no_further_step_and_fails(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    entered, release = threading.Event(), threading.Event()
    later: list[int] = []

    @dramatiq.actor(broker=app.broker)
    def slow(x: int) -> int:
        entered.set()
        release.wait(TIMEOUT_S)
        return x

    @dramatiq.actor(broker=app.broker)
    def after(x: int) -> None:
        later.append(x)

    start_worker(app)
    run = app.start(chain(slow, after), args=(1,), deadline_s=0.3)
    assert entered.wait(TIMEOUT_S)
    past = run.status().created_at_ms + 300
    while time.time() * 1000 <= past:  # the deadline is a point in time; nothing to await but the clock
        time.sleep(0.05)
    release.set()
    status = run.wait(TIMEOUT_S)
    observer.wait_handled("slow", 1)

    assert (status.state, status.error, status.failed_step) == ("failed", "deadline exceeded", "0.0")
    assert later == []
    assert "after" not in observer.handled


def test_a_dead_letter_reason_reads_back_from_its_headers() -> None:
    reason = DeadLetterReason(reason="permanent error", error_type="ValueError", attempts=1, at="2026-11-30T00:00:00")

    assert DeadLetterReason.from_headers(reason.to_headers()) == reason
