"""Scheduled jobs: periodiq ticks, claimed once each, and the ticks missed while no scheduler ran.

periodiq's scheduler sends a scheduled actor's message on every cron tick, stamped ``scheduled_at``.
Two schedulers (for high availability) send each tick twice; the ``Schedules`` middleware claims the
tick in the run store before the actor runs, so only the first copy runs. The claim happens in the
worker, not in the scheduler: a scheduler that claimed a tick and died before publishing would lose it.

A tick is identified by its minute (cron's resolution), so copies sent a second apart are the same
tick. The run store remembers each job's last tick; :func:`missed_ticks` lists the ticks due since
then, which the job's ``missed`` policy skips (counted, and the last-run metric ages so the
missed-run alert fires) or catches up with one run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pendulum

#: Most ticks looked at when counting missed ones (a minutely job missed for a week is 10,080).
MAX_TICKS_CHECKED = 20_000
#: Milliseconds in a minute, the resolution of a tick.
MINUTE_MS = 60_000

_local = threading.local()


def tick_of(scheduled_at: str) -> int:
    """The tick (epoch ms, on the minute) a message stamped ``scheduled_at`` by periodiq belongs to."""
    at_ms = datetime.fromisoformat(scheduled_at).timestamp() * 1000
    return round(at_ms / MINUTE_MS) * MINUTE_MS


def missed_ticks(spec: Any, last_ms: int, now_ms: int, grace_s: float) -> list[int]:
    """Ticks of cron ``spec`` after ``last_ms`` that were due more than ``grace_s`` before ``now_ms``."""
    due_before = now_ms - grace_s * 1000
    # periodiq evaluates cron specs in local time (pendulum.now()): so do we.
    local = pendulum.now().timezone_name or "UTC"
    tick = spec.next_valid_date(pendulum.from_timestamp(last_ms / 1000).in_timezone(local))
    missed: list[int] = []
    while tick.timestamp() * 1000 <= due_before and len(missed) < MAX_TICKS_CHECKED:
        missed.append(int(tick.timestamp() * 1000))
        tick = spec.next_valid_date(tick)
    return missed


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
