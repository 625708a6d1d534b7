"""Scheduled jobs: one run per tick however many schedulers send it, and missed-tick policies."""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Sequence
from typing import Any

import dramatiq
import pendulum
import periodiq
import pytest
from periodiq import cron
from prometheus_client.parser import text_string_to_metric_families

from pipelines import step
from pipelines.middleware import Metrics
from pipelines.middleware.schedules import CHECK
from pipelines.observability.metrics_http import serve_http
from pipelines.schedules.ticks import current_tick, tick_of, ticks_between
from tests.support.fixtures import MakeApp, Observe, StartWorker
from tests.support.ports import free_port

MINUTE_MS = 60_000
#: A day in the past the tests' clock travels to (periodiq, the scheduler and the check read pendulum's).
DAY = (2026, 11, 30)


def tick_message(actor: dramatiq.Actor[Any, Any], at: str) -> dramatiq.Message[Any]:
    """What periodiq's scheduler sends on a tick."""
    return actor.message_with_options(scheduled_at=at)


def test_a_tick_is_the_latest_cron_time_at_or_before_its_stamp() -> None:
    def tick(at: str, spec: str) -> str:
        return str(pendulum.from_timestamp(tick_of(at, cron(spec)) / 1000))

    assert tick("2026-11-30 04:47:35+00:00", "47 * * * *") == "2026-11-30 04:47:00+00:00"  # not 04:48
    assert tick("2026-11-30 04:47:59+00:00", "* * * * *") == "2026-11-30 04:47:00+00:00"
    assert tick("2026-11-30 04:47:35+00:00", "*/10 * * * *") == "2026-11-30 04:40:00+00:00"
    assert tick("2026-11-30 02:00:40+00:00", "0 2 * * *") == "2026-11-30 02:00:00+00:00"
    assert tick("2026-11-30 01:59:59+00:00", "0 2 * * *") == "2026-11-29 02:00:00+00:00"
    start = int(pendulum.datetime(2026, 11, 30, 1, 0).timestamp() * 1000)
    every_10 = ticks_between(cron("*/10 * * * *"), start, start + 60 * MINUTE_MS)
    assert [(t - start) // MINUTE_MS for t in every_10] == [10, 20, 30, 40, 50, 60]


def test_two_schedulers_sending_the_same_tick_run_the_job_once(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int | None] = []

    @dramatiq.actor(broker=app.broker, periodic=cron("* * * * *"))
    def cleanup() -> None:
        ran.append(current_tick())

    start_worker(app)
    now = pendulum.now().replace(microsecond=0)
    other = now.add(seconds=1) if now.second < 59 else now.subtract(seconds=1)  # the same minute
    app.broker.enqueue_many([tick_message(cleanup, str(now)), tick_message(cleanup, str(other))])
    observer.wait_handled("cleanup", 2)

    assert ran == [tick_of(str(now))]
    assert observer.skipped == {"cleanup": 1}
    assert app.store.tick_claims("cleanup", tick_of(str(now))) == 2


def test_a_scheduled_pipeline_starts_one_run_per_tick(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
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

    run = app.run_for_key(f"schedule:daily:{tick_of(at, cron('0 2 * * *'))}")
    assert run is not None
    assert run.result(timeout_s=10) == "report today"
    assert observer.handled["summarise"] == 1
    assert starter.options["missed"] == "catch_up"


class Clock:
    """A fake time source for pendulum.now(), which periodiq, its middleware and the check read."""

    def __init__(self) -> None:
        self.at = pendulum.now()

    def set(self, at: pendulum.DateTime) -> None:
        self.at = at

    def now(self, tz: Any = None) -> pendulum.DateTime:
        return self.at.in_timezone(tz) if tz is not None else self.at


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(pendulum, "now", fake.now)
    return fake


def exported(app: Any, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of ``name`` the app's metrics serve on ``/metrics`` (labels as served, namespace too)."""
    metrics = next(m for m in app.broker.middleware if isinstance(m, Metrics))
    server = serve_http(
        "127.0.0.1", free_port(), metrics.registry, namespace=app.settings.namespace, health=lambda: None
    )
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def scheduler_wakes(actors: Sequence[dramatiq.Actor[Any, Any]]) -> None:
    """What periodiq's scheduler does when it starts (or its alarm rings): send the ticks due now."""
    previous = signal.getsignal(signal.SIGALRM)
    try:
        periodiq.Scheduler(actors=list(actors)).schedule()
    finally:
        signal.alarm(0)  # the test wakes it, not the alarm it set for the next tick
        signal.signal(signal.SIGALRM, previous)


def scheduled_actors(app: Any) -> list[dramatiq.Actor[Any, Any]]:
    return [actor for actor in app.broker.actors.values() if "periodic" in actor.options]


def test_a_scheduler_started_late_in_a_matching_minute_runs_the_tick_once(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, clock: Clock
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int | None] = []

    @dramatiq.actor(broker=app.broker, periodic=cron("47 * * * *"))
    def hourly() -> None:
        ran.append(current_tick())

    start_worker(app)
    clock.set(pendulum.local(*DAY, 4, 47, 0))  # a scheduler sends the 04:47 tick
    scheduler_wakes(scheduled_actors(app))
    observer.wait_handled("hourly", 1)
    clock.set(pendulum.local(*DAY, 4, 47, 35))  # a second scheduler starts at 04:47:35
    scheduler_wakes(scheduled_actors(app))
    observer.wait_handled("hourly", 2)

    tick = int(pendulum.local(*DAY, 4, 47).timestamp() * 1000)
    print(f"\nlate start at second 35: {len(ran)} run(s) for tick 04:47, ticks run {ran}")
    assert ran == [tick]
    assert observer.skipped["hourly"] == 1
    assert app.store.tick_claims("hourly", tick) == 2


@pytest.mark.parametrize("first", ["tick", "check"])
@pytest.mark.parametrize("missed", ["skip", "catch_up"])
def test_an_outage_of_three_ticks_counts_three_missed_whatever_comes_first(
    *,
    make_app: MakeApp,
    start_worker: StartWorker,
    observe: Observe,
    clock: Clock,
    caplog: Any,
    missed: str,
    first: str,
) -> None:
    app = make_app(metrics={"enabled": True, "multiprocess": False, "port": free_port()})
    observer = observe(app)
    ran: list[int | None] = []

    @dramatiq.actor(broker=app.broker, periodic=cron("* * * * *"), missed=missed)
    def cleanup() -> None:
        ran.append(current_tick())

    check = app.broker.get_actor(CHECK)
    start_worker(app)

    def minute(m: int) -> pendulum.DateTime:
        return pendulum.local(*DAY, 10, m)

    handled = {"cleanup": 0, CHECK: 0}

    def sent(*actors: dramatiq.Actor[Any, Any], extra_runs: int = 0) -> None:
        for actor in actors:
            handled[actor.actor_name] += 1
        handled["cleanup"] += extra_runs
        for name, count in handled.items():
            observer.wait_handled(name, count)

    clock.set(minute(0))
    scheduler_wakes([cleanup, check])
    sent(cleanup, check)
    # 10:01, 10:02, 10:03: no scheduler runs. 10:04: one starts; its two messages run in either order.
    clock.set(minute(4))
    order = [cleanup, check] if first == "tick" else [check, cleanup]
    for actor in order:
        periodiq.Scheduler(actors=[actor]).send_actors([actor], minute(4))
        sent(actor)
    for m in (5, 6):
        clock.set(minute(m))
        scheduler_wakes([cleanup, check])
        sent(cleanup, check, extra_runs=1 if missed == "catch_up" and m == 5 else 0)

    def at(m: int) -> int:
        return int(minute(m).timestamp() * 1000)

    counted = exported(app, "pipelines_schedule_missed_ticks_total")
    total = sum(value for _, value in counted)
    print(
        f"\noutage of 3 ticks, missed={missed}, {first} first: missed ticks exported {total:g}, ran {len(ran)} tick(s)"
    )
    # Every scheduled actor's series is served from boot, at zero until a tick is missed.
    assert {labels["actor"]: value for labels, value in counted} == {"cleanup": 3.0, CHECK: 0.0}
    assert {labels["pipelines_namespace"] for labels, _ in counted} == {app.settings.namespace}
    logged = [r.getMessage() for r in caplog.records if "that no scheduler sent" in r.getMessage()]
    first_missed, latest_missed = (minute(m).in_timezone("UTC").to_iso8601_string() for m in (1, 3))
    assert len(logged) == 1
    assert f"cleanup missed 3 tick(s) from {first_missed} to {latest_missed}" in logged[0]
    assert ("catching up once for" in logged[0]) == (missed == "catch_up")
    catch_up = [at(3)] if missed == "catch_up" else []
    assert sorted(t or 0 for t in ran) == sorted([at(0), at(4), at(5), at(6), *catch_up])
    assert app.store.tick_claims("cleanup", at(3)) == len(catch_up)
