"""The scheduler outage test's actors, on a clock that starts at second 50 of a minute.

Imported by `pipelines scheduler` (and the worker): pendulum's clock, which periodiq reads, runs
ahead of the wall by up to a minute, so the scheduler sends its start-up tick at once and the next
tick ten seconds later, and the test waits seconds, not minutes. A tick stamped ahead of the
worker's wall clock is not late, so the worker runs it.
"""

from __future__ import annotations

import os

import pendulum

_real_now = pendulum.now
_start = _real_now()
#: How far ahead of the wall this process's clock runs (the scheduler's only; the worker's is the wall).
AHEAD_S = (50 - _start.second) % 60 - _start.microsecond / 1e6 if os.environ.get("SCHED_CLOCK_AHEAD") else 0.0


def _now(tz: object = None) -> pendulum.DateTime:
    return _real_now(tz).add(microseconds=int(AHEAD_S * 1e6))  # type: ignore[arg-type]


pendulum.now = _now

from tests.support.faults.sched_worker import app, broker, ledger, minutely  # noqa: E402

__all__ = ["app", "broker", "ledger", "minutely"]
