"""Scheduled jobs: periodiq ticks, claimed once each, and the ticks no scheduler sent.

periodiq's scheduler sends a scheduled actor's message on every cron tick, stamped ``scheduled_at``.
Two schedulers (for high availability) send each tick twice; the ``Schedules`` middleware claims the
tick in the run store before the actor runs, so only the first copy runs. The claim happens in the
worker, not in the scheduler: a scheduler that claimed a tick and died before publishing would lose it.

A tick is the cron time a message belongs to: the latest time matching the job's cron at or before
``scheduled_at``. periodiq stamps a tick with the second it sends it, and a scheduler started late in a
matching minute sends that minute's tick with the current second; both copies are the same tick, so
the later one is a duplicate. The check job sweeps each job's ticks in order (see
``pipelines.middleware.schedules``): a tick nobody claimed within the grace period is a missed tick.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pendulum

#: Most ticks looked at in one sweep or one look back (a minutely job missed for a week is 10,080).
MAX_TICKS_CHECKED = 20_000
#: How far back (hours) the latest cron time is looked for, widening: an hour, a day, a month, a
#: year, eight years (a cron on the 29th of February).
LOOK_BACK_H = (1, 24, 24 * 32, 24 * 367, 24 * 366 * 8)

#: Seconds a tick message may be late before the worker skips it (periodiq's middleware): a tick is
#: due until then, and a scheduler retrying a failed publish stops there.
SCHEDULE_SKIP_DELAY_S = 30

_local = threading.local()


def _local_time(at: pendulum.DateTime) -> pendulum.DateTime:
    # periodiq evaluates cron specs in local time (pendulum.now()): so do we.
    return at.in_timezone(pendulum.now().timezone_name or "UTC")


def tick_of(scheduled_at: str, spec: Any = None) -> int:
    """The tick (epoch ms) a message stamped ``scheduled_at`` belongs to: the latest cron time of
    ``spec`` at or before it (its minute without a spec, or when the cron never matched before it)."""
    local = pendulum.now().timezone_name or "UTC"
    at = pendulum.instance(datetime.fromisoformat(scheduled_at), tz=local)
    minute = _local_time(at).replace(second=0, microsecond=0)
    if spec is None or spec.validate(minute):
        return _ms(minute)
    for hours in LOOK_BACK_H:
        latest = None
        tick = spec.next_valid_date(minute.subtract(hours=hours))
        for _ in range(MAX_TICKS_CHECKED):
            if tick > minute:
                break
            latest, tick = tick, spec.next_valid_date(tick)
        if latest is not None:
            return _ms(latest)
    return _ms(minute)


def ticks_between(spec: Any, after_ms: int, through_ms: int) -> list[int]:
    """Ticks of cron ``spec`` after ``after_ms`` up to ``through_ms`` (at most ``MAX_TICKS_CHECKED``)."""
    tick = spec.next_valid_date(_local_time(pendulum.from_timestamp(after_ms / 1000)))
    ticks: list[int] = []
    while _ms(tick) <= through_ms and len(ticks) < MAX_TICKS_CHECKED:
        ticks.append(_ms(tick))
        tick = spec.next_valid_date(tick)
    return ticks


def _ms(at: pendulum.DateTime) -> int:
    return int(at.timestamp() * 1000)


def enter_tick(tick_ms: int | None) -> None:
    """Make ``tick_ms`` the tick the current thread's scheduled actor runs for (the middleware sets it)."""
    _local.tick = tick_ms


def current_tick() -> int | None:
    """The tick (epoch ms) the current scheduled actor runs for; None outside a scheduled run."""
    tick: int | None = getattr(_local, "tick", None)
    return tick


def pipeline_starter(start: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The body of a scheduled pipeline's actor: start run ``name`` once per tick (keyed by the tick)."""

    def start_scheduled_pipeline() -> None:
        tick = current_tick()
        key = f"schedule:{name}:{tick}" if tick is not None else None
        start(name, *args, idempotency_key=key, **kwargs)

    return start_scheduled_pipeline
