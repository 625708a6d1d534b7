"""Scheduled jobs: one run per tick however many schedulers send it, and missed-tick policies."""

from __future__ import annotations

import time
from typing import Any

import dramatiq
import pendulum
import pytest
from periodiq import cron

from pipelines import step
from pipelines.middleware.schedules import CHECK, Schedules
from pipelines.schedules import current_tick, missed_ticks, tick_of

MINUTE_MS = 60_000


def tick_message(actor: dramatiq.Actor[Any, Any], at: str) -> dramatiq.Message[Any]:
    """What periodiq's scheduler sends on a tick."""
    return actor.message_with_options(scheduled_at=at)


def test_a_tick_is_its_minute_and_missed_ticks_follow_the_cron() -> None:
    assert tick_of("2026-11-30 04:55:05+00:00") == tick_of("2026-11-30 04:54:59+00:00")
    assert tick_of("2026-11-30 04:55:00+00:00") != tick_of("2026-11-30 04:56:00+00:00")
    start = int(pendulum.datetime(2026, 11, 30, 1, 0).timestamp() * 1000)
    now = start + 60 * MINUTE_MS
    every_10 = missed_ticks(cron("*/10 * * * *"), start, now, grace_s=90)
    assert [(t - start) // MINUTE_MS for t in every_10] == [10, 20, 30, 40, 50]  # 60 is within the grace


def test_two_schedulers_sending_the_same_tick_run_the_job_once(make_app: Any, start_worker: Any, observe: Any) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int | None] = []

    @dramatiq.actor(broker=app.broker, periodic=cron("* * * * *"))
    def cleanup() -> None:
        ran.append(current_tick())

    start_worker(app)
    now = pendulum.now().replace(microsecond=0)
    app.broker.enqueue_many([tick_message(cleanup, str(now)), tick_message(cleanup, str(now.add(seconds=1)))])
    observer.wait_handled("cleanup", 2)

    assert ran == [tick_of(str(now))]
    assert observer.skipped == {"cleanup": 1}
    assert app.store.tick_claims("cleanup", tick_of(str(now))) == 2


@pytest.mark.parametrize(("missed", "catch_up_runs"), [("catch_up", 1), ("skip", 0)])
def test_ticks_missed_while_no_scheduler_ran_follow_the_jobs_policy(
    make_app: Any, start_worker: Any, observe: Any, missed: str, catch_up_runs: int
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int | None] = []

    @dramatiq.actor(broker=app.broker, periodic=cron("* * * * *"), missed=missed)
    def cleanup() -> None:
        ran.append(current_tick())

    counted: list[tuple[str, int]] = []
    next(m for m in app.broker.middleware if isinstance(m, Schedules)).listeners.append(
        lambda job, n: counted.append((job, n))
    )
    # The job last ran ten minutes ago; then no scheduler ran.
    last = tick_of(str(pendulum.now())) - 10 * MINUTE_MS
    assert app.store.claim_tick("cleanup", last, retention_s=600)
    start_worker(app)
    check = app.broker.get_actor(CHECK)
    check.send()
    observer.wait_handled(CHECK, 1)
    check.send()  # a second check finds the same missed ticks: nothing more happens
    observer.wait_handled(CHECK, 2)
    if catch_up_runs:
        observer.wait_handled("cleanup", 1)

    latest_missed = missed_ticks(cron("* * * * *"), last, int(time.time() * 1000), 90)[-1]
    assert len(ran) == catch_up_runs
    assert ran == [latest_missed] * catch_up_runs
    assert counted == [("cleanup", 8)]  # minutes 1..8 after the last run; 9 and 10 are within the grace
    assert app.store.last_tick("cleanup") == latest_missed


def test_a_scheduled_pipeline_starts_one_run_per_tick(make_app: Any, start_worker: Any, observe: Any) -> None:
    app = make_app()
    observer = observe(app)

    @dramatiq.actor(broker=app.broker)
    def summarise(day: str) -> str:
        return f"report {day}"

    app.register("daily", step(summarise, "today"))
    starter = app.schedule("daily", cron("0 2 * * *"), missed="catch_up")
    start_worker(app)
    at = str(pendulum.now().replace(microsecond=0))
    app.broker.enqueue_many([tick_message(starter, at), tick_message(starter, at)])
    observer.wait_handled("summarise", 1)
    observer.wait_handled(starter.actor_name, 2)

    run = app.run_for_key(f"schedule:daily:{tick_of(at)}")
    assert run is not None
    assert run.result(timeout_s=10) == "report today"
    assert observer.handled["summarise"] == 1
    assert starter.options["missed"] == "catch_up"
