"""The middleware of every broker, in one list in one place, its order justified line by line.

The stack is a concept of its own: which middleware every worker and producer runs, and in which order,
since each hook relies on what the ones before it decided. It is part of the composition root
(``pipelines.app`` builds the app with it, and nothing else imports it), a layer of its own between
the app and the middleware: the one place that knows them all and what each is built with.
"""

from __future__ import annotations

import dramatiq
from dramatiq.middleware import Callbacks, Pipelines, ShutdownNotifications
from opentelemetry import trace
from periodiq import PeriodiqMiddleware

from pipelines.config.settings import Settings
from pipelines.flow.runtime import Runtime
from pipelines.flow.stall_sweep import StallSweep
from pipelines.handling.holds import Holds
from pipelines.middleware import (
    ActorTimeLimit,
    Backoff,
    CorrelationId,
    DeadLetter,
    Heartbeat,
    Idempotency,
    Leases,
    MaxAge,
    Metrics,
    OutboxRelay,
    Payloads,
    PipelineSteps,
    Profiles,
    RateLimits,
    Schedules,
    StalledRuns,
    StepLogs,
    Timeout,
    Tracing,
)
from pipelines.middleware.backoff import import_exceptions
from pipelines.observability.metrics_process import serve_metrics
from pipelines.observability.telemetry import tail_keeping
from pipelines.rate_limits.limiter import RateLimiter, slot_grace_ms
from pipelines.schedules.ticks import SCHEDULE_SKIP_DELAY_S
from pipelines.store import RunStore
from pipelines.store.roles.transactions import OutboxRelaying

__all__ = ["build_middleware"]

#: Longest the framework's own actors (lease watchdog, schedule check, deadline check) may run, in seconds.
SYSTEM_ACTOR_TIMEOUT_S = 60.0


def build_middleware(
    settings: Settings, runtime: Runtime, store: RunStore, *, tracer: trace.Tracer | None = None
) -> list[dramatiq.Middleware]:
    """The middleware of every broker, in order.

    ``before_*`` hooks run top to bottom, ``after_*`` hooks bottom to top, so:

    - ``Profiles`` is first: it checks an actor's profile and fills in its defaults when the actor is
      declared, before the other middleware read them (it has no message hooks).
    - ``CorrelationId`` is first: its context is set before any other hook logs, and cleared last.
    - ``Tracing`` (with ``[telemetry] enabled``) comes next: its span covers everything below, and
      every publish made while a message is processed is a child of that message's span.
    - ``Metrics`` (with ``[metrics] enabled``) comes next, so its ``after_*`` hooks run after the
      others have decided (failed, retried, skipped as a duplicate) and it counts what they decided.
    - ``Heartbeat`` comes with the observers, before anything may skip a message: it sees each message
      start and end, so it counts those processed and failed (and times them), and knows what runs now;
      its ``after_nack`` counts those dead-lettered after every other hook decided.
    - ``MaxAge`` (Dramatiq's ``AgeLimit`` with a reason) comes before anything claims or decides about
      a message: one past its age is only dead-lettered (and a step's run failed, by ``PipelineSteps``).
    - ``Timeout`` comes before ``ActorTimeLimit`` (Dramatiq's ``TimeLimit``), which enforces the limit
      it sets.
    - ``ActorTimeLimit`` is last: it arms the limit when the actor's function starts and disarms it
      when the function returns, so it interrupts only the actor, never a claim, the record of a step
      that finished or the worker's own failure handling (a limit that fired there after a stall made
      a step that had done its work run again, or killed the worker thread holding its message).
    - ``Payloads`` opens sealed arguments and validates typed payloads before anything reads them
      (idempotency keys are computed from what the actor will get).
    - ``RateLimits`` takes a rate-limit slot before ``Idempotency`` and ``PipelineSteps`` claim
      anything: a message it puts off until its slot has claimed nothing that would hold it up later.
    - ``Idempotency`` and ``PipelineSteps`` decide whether a message runs at all; both come before
      ``Backoff``, so after a failure they see whether ``Backoff`` gave up (the run fails, the key is
      released) or scheduled another attempt.
    - ``StepLogs`` comes right after ``PipelineSteps``: it captures what a step logs once the step is
      claimed, until just before ``PipelineSteps`` records the step's end (with those records).
    - ``StalledRuns`` comes right after them: it keeps alive the run of a step only once
      the step claimed it, and sweeps for runs nothing advances (a thread of its own).
    - ``Leases`` comes after both: a long-running job is acknowledged and leased only once it is sure
      to run, and its lease is closed after ``Backoff`` decided on a retry.
    - ``DeadLetter`` only acts just before a rejection, which comes after every other hook.
    - ``OutboxRelay`` (with the PostgreSQL store) has no message hooks: its thread publishes the runs
      started in callers' transactions.
    - ``Schedules`` comes after periodiq's middleware, which skips ticks that arrive too late: only a
      tick that will run is claimed.

    Dramatiq's ``Callbacks`` and ``Pipelines`` stay, so its ``pipeline()`` and ``on_success``/
    ``on_failure`` keep working; ``Backoff`` replaces its ``Retries`` (same actor options).
    """
    observing: list[dramatiq.Middleware] = []
    # The framework's own actors (lease watchdog, schedule check, deadline check) are quick: a short time limit.
    system_timeout_s = min(SYSTEM_ACTOR_TIMEOUT_S, settings.broker.consumer_timeout_s)
    schedules = Schedules(store=store, grace_s=settings.profiles.scheduled_grace_s, system_timeout_s=system_timeout_s)
    if tracer is not None:
        keeping = tail_keeping(settings.telemetry)
        observing.append(Tracing(tracer=tracer, namespace=settings.namespace, keeping=keeping))
    if settings.metrics.enabled:
        metrics = Metrics(config=settings.metrics, namespace=settings.namespace, serve=serve_metrics)
        runtime.listeners.append(metrics)
        schedules.listeners.append(metrics.ticks_missed)
        observing.append(metrics)
    observing.append(Heartbeat(store=store, interval_s=settings.worker.heartbeat_s))
    # What this process holds while it runs (steps' and keys' leases), renewed by one heartbeat.
    holds = Holds(store=store, lease_s=settings.store.step_lease_s)
    return [
        Profiles(config=settings.profiles),
        CorrelationId(logging=settings.logging),
        *observing,
        MaxAge(),
        Timeout(default_s=settings.worker.time_limit_s, consumer_timeout_s=settings.broker.consumer_timeout_s),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Payloads(sealer=runtime.sealer),
        RateLimits(limiter=RateLimiter(store), grace_ms=slot_grace_ms(settings.broker.delay_tiers_s[0])),
        Idempotency(store=store, holds=holds, retention_s=settings.store.idempotency_retention_s),
        PipelineSteps(
            runtime=runtime,
            store=store,
            holds=holds,
            system_timeout_s=system_timeout_s,
            local_steps=settings.worker.local_steps,
        ),
        StepLogs(max_records=settings.store.step_log_records, max_bytes=settings.store.step_log_bytes),
        StalledRuns(
            sweep=StallSweep(
                store=store,
                runtime=runtime,
                stalled_after_s=settings.store.stalled_after_s,
                redrives=settings.store.stalled_run_redrives,
                lease_s=settings.store.step_lease_s,
            ),
            store=store,
        ),
        Leases(
            runtime=runtime,
            store=store,
            default_max_retries=settings.retries.max_retries,
            system_timeout_s=system_timeout_s,
        ),
        Backoff(
            max_retries=settings.retries.max_retries,
            min_backoff_ms=int(settings.retries.min_backoff_s * 1000),
            max_backoff_ms=int(settings.retries.max_backoff_s * 1000),
            permanent=import_exceptions(settings.retries.permanent_errors),
        ),
        DeadLetter(),
        *([OutboxRelay(store=store)] if isinstance(store, OutboxRelaying) else []),
        PeriodiqMiddleware(skip_delay=SCHEDULE_SKIP_DELAY_S),
        schedules,
        ActorTimeLimit(time_limit=int(settings.worker.time_limit_s * 1000)),
    ]
