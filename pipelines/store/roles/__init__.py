"""The run store's roles: each consumer takes only the one it uses, so a test double stays small.

============== ================================================ =====================================
role           what it holds                                    used by
============== ================================================ =====================================
RunSteps       runs started and advanced step by step           the runtime
RunViews       runs read, awaited and cancelled by callers      ``Run`` handles, the app, the CLI
RunFeeds       one subscription to many runs' changes           the asyncio API's run watcher
RunPlans       a run's stored plan and its steps' results       the web console
StepProgress   a running step's progress reports                ``progress.Job``
StepReplays    a dead-lettered step reopened in its run         dead-letter replays
StepLogs       the log records of steps' attempts               the web console, ``pipelines status``
OnceMarks      "this happened once" marks                       dead-letter replays
KeyClaims      idempotency keys of standalone messages          the ``Idempotency`` middleware
JobLeases      leases of long-running jobs                      the ``Leases`` middleware
StallChecks    running runs kept alive, stalled ones found      the ``StalledRuns`` middleware
ScheduleTicks  claims and sweeps of scheduled jobs' ticks       the ``Schedules`` middleware
RateSlots      slots of rate limits                             ``RateLimiter``
WorkerBeats    worker processes' heartbeats                     ``Heartbeat``, the console, the CLI
MessageCounts  messages per actor and minute, kept an hour      ``Heartbeat``, the console, the CLI
StoreLifecycle a health check and the connection's end          the app
============== ================================================ =====================================

:class:`RunStore` is all of them, for the composition root. Every role has contract tests under
``tests/pipelines/store/`` that every backend passes. The roles about runs and their steps are defined in
``roles.runs``, those about what the store keeps beside runs in ``roles.records``. What only a store in the
application's own database gives (runs started in the caller's transaction, their outbox relayed, a step's
own transaction) is in ``roles.transactions``, outside :class:`RunStore`: the PostgreSQL store has it.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.store.roles.records import (
    JobLeases,
    KeyClaims,
    MessageCounts,
    OnceMarks,
    RateSlots,
    ScheduleTicks,
    StoreLifecycle,
    WorkerBeats,
)
from pipelines.store.roles.runs import (
    Holds,
    RunFeeds,
    RunPlans,
    RunStates,
    RunSteps,
    RunViews,
    StallChecks,
    StepLogs,
    StepProgress,
    StepReplays,
)

__all__ = [
    "Holds",
    "JobLeases",
    "KeyClaims",
    "MessageCounts",
    "OnceMarks",
    "RateSlots",
    "RunFeeds",
    "RunPlans",
    "RunStates",
    "RunSteps",
    "RunStore",
    "RunViews",
    "ScheduleTicks",
    "StallChecks",
    "StepLogs",
    "StepProgress",
    "StepReplays",
    "StoreLifecycle",
    "WorkerBeats",
]


class RunStore(
    RunSteps,
    RunViews,
    RunFeeds,
    RunPlans,
    StepProgress,
    StepReplays,
    StepLogs,
    Holds,
    OnceMarks,
    KeyClaims,
    JobLeases,
    StallChecks,
    ScheduleTicks,
    RateSlots,
    WorkerBeats,
    MessageCounts,
    StoreLifecycle,
    Protocol,
):
    """Every role: what the composition root builds and hands out role by role."""
