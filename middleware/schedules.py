"""Runs each scheduled tick once, and handles ticks that no scheduler sent.

See ``pipelines.schedules``. Before a message stamped ``scheduled_at`` runs, its tick (the cron time it
belongs to) is claimed in the run store: a second copy (from a second scheduler, or from a scheduler
started late in the tick's minute) is skipped and counted as a duplicate. With the first scheduled
actor, a check job is declared that periodiq sends every minute; it sweeps each job's cron ticks in
order from where the last sweep stopped, and a tick nobody claimed within the grace period is missed,
however the check and the job's later ticks interleave. Missed ticks are counted and logged once and
follow the job's ``missed`` policy: ``skip`` passes them, ``catch_up`` sends the job once, for the
latest of them. So a scheduler back after an outage catches up within a minute or two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq
import pendulum
from dramatiq.middleware import Middleware, SkipMessage
from periodiq import cron

from pipelines import options as opt
from pipelines.errors import ServiceUnavailable
from pipelines.handling.deferral import put_off_while_store_down
from pipelines.handling.outcome import outcome_of
from pipelines.schedules.ticks import MAX_TICKS_CHECKED, enter_tick, tick_of, ticks_between
from pipelines.store.roles import ScheduleTicks
from pipelines.wire import option_values as wire_options

logger = logging.getLogger(__name__)

#: The job that looks for missed ticks, every minute (declared with the first scheduled actor).
CHECK = "pipelines_schedule_check"
#: Dramatiq queue of the check job.
CHECK_QUEUE = "pipelines"
#: How long tick claims are remembered, in seconds.
TICK_RETENTION_S = 7 * 86400

MissedListener = Callable[[str, int], None]


class TickStore(ScheduleTicks, Protocol):
    """What schedules need of the run store: tick claims and sweeps."""


class Schedules(Middleware):
    """Claims ticks and applies missed-tick policies (see the module docstring)."""

    def __init__(self, *, store: TickStore, grace_s: float, system_timeout_s: float) -> None:
        self.store = store
        self.system_timeout_s = system_timeout_s
        self.grace_s = grace_s
        self.listeners: list[MissedListener] = []
        """Called with (job, number of missed ticks) when missed ticks are found (metrics)."""
        self._broker: Any = None

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        if opt.PERIODIC in actor.options and CHECK not in broker.actors:
            self._broker = broker
            declare = dramatiq.actor(
                broker=broker,
                actor_name=CHECK,
                queue_name=CHECK_QUEUE,
                periodic=cron("* * * * *"),
                max_retries=0,
                timeout_s=self.system_timeout_s,
            )
            declare(self.check_missed)

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        scheduled_at = wire_options.scheduled_at(message.options)
        if scheduled_at is None:
            enter_tick(None)
            return
        actor = broker.actors.get(message.actor_name)
        spec = actor.options.get(opt.PERIODIC) if actor is not None else None
        tick = wire_options.catch_up_of(message.options) or tick_of(scheduled_at, spec)
        try:
            first = self.store.claim_tick(message.actor_name, tick, retention_s=TICK_RETENTION_S)
        except ServiceUnavailable as e:
            put_off_while_store_down(broker, message, e)
            raise SkipMessage from None
        if not first:
            logger.info("Skipping %s: tick %s of %s ran already.", message.message_id, scheduled_at, message.actor_name)
            outcome_of(message).duplicate = True
            raise SkipMessage
        enter_tick(tick)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        enter_tick(None)

    def check_missed(self) -> None:
        """Sweep each scheduled job's ticks and apply its ``missed`` policy (the check job's body)."""
        now_ms = int(pendulum.now().timestamp() * 1000)  # periodiq's clock, which tests can travel
        cutoff_ms = now_ms - int(self.grace_s * 1000)
        for actor in list(self._broker.actors.values()):
            spec = actor.options.get(opt.PERIODIC)
            if spec is None or actor.actor_name == CHECK:
                continue
            swept = self.store.swept_through(actor.actor_name)
            if swept is None:
                continue  # never ran: nothing to compare with
            ticks = ticks_between(spec, swept, now_ms)
            through_ms = cutoff_ms if len(ticks) < MAX_TICKS_CHECKED else min(cutoff_ms, ticks[-1])
            missed = self.store.sweep_ticks(actor.actor_name, ticks, cutoff_ms=cutoff_ms, through_ms=through_ms)
            if missed:
                self._missed(actor, missed)

    def _missed(self, actor: dramatiq.Actor[Any, Any], missed: list[int]) -> None:
        """Count, log and apply the policy to missed ticks, which one sweep hands out once."""
        first, latest = (pendulum.from_timestamp(t / 1000).to_iso8601_string() for t in (missed[0], missed[-1]))
        for listener in self.listeners:
            listener(actor.actor_name, len(missed))
        if actor.options.get(opt.MISSED, "skip") == "catch_up":
            logger.warning(
                "%s missed %d tick(s) from %s to %s that no scheduler sent; catching up once for %s.",
                actor.actor_name,
                len(missed),
                first,
                latest,
                latest,
            )
            actor.send_with_options(
                scheduled_at=pendulum.now().replace(microsecond=0).to_iso8601_string(), catch_up_of=missed[-1]
            )
        else:
            logger.warning(
                "%s missed %d tick(s) from %s to %s that no scheduler sent; skipped.",
                actor.actor_name,
                len(missed),
                first,
                latest,
            )
