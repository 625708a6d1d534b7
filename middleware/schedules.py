"""Runs each scheduled tick once, and handles ticks missed while no scheduler ran.

See ``pipelines.schedules``. Before a message stamped ``scheduled_at`` runs, its tick is claimed in the
run store: a second copy (from a second scheduler) is skipped and counted as a duplicate. With the
first scheduled actor, a check job is declared that periodiq sends every minute; it compares each
job's last tick with its cron and applies the job's ``missed`` policy to ticks that never came:
``skip`` records them as passed (and logs and counts them), ``catch_up`` sends the job once, for the
latest of them. So a scheduler back after an outage catches up within a minute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq
import pendulum
from dramatiq.middleware import Middleware, SkipMessage
from periodiq import cron

from pipelines import options as opt
from pipelines.deferral import put_off_while_store_down
from pipelines.errors import ServiceUnavailable
from pipelines.outcome import outcome_of
from pipelines.schedules import enter_tick, missed_ticks, tick_of
from pipelines.store.roles import OnceMarks, ScheduleTicks

logger = logging.getLogger(__name__)

#: The job that looks for missed ticks, every minute (declared with the first scheduled actor).
CHECK = "pipelines_schedule_check"
#: Dramatiq queue of the check job.
CHECK_QUEUE = "pipelines"
#: How long tick claims are remembered, in seconds.
TICK_RETENTION_S = 7 * 86400

MissedListener = Callable[[str, int], None]


class TickStore(ScheduleTicks, OnceMarks, Protocol):
    """What schedules need of the run store: tick claims, and a catch-up run once per missed tick."""


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
        scheduled_at = message.options.get(opt.SCHEDULED_AT)
        if scheduled_at is None:
            enter_tick(None)
            return
        tick = int(message.options.get(opt.CATCH_UP_OF) or tick_of(str(scheduled_at)))
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
        """Apply each scheduled job's ``missed`` policy to the ticks it missed (the check job's body)."""
        now_ms = int(time.time() * 1000)
        for actor in list(self._broker.actors.values()):
            spec = actor.options.get(opt.PERIODIC)
            if spec is None or actor.actor_name == CHECK:
                continue
            last = self.store.last_tick(actor.actor_name)
            if last is None:
                continue  # never ran: nothing to compare with
            missed = missed_ticks(spec, last, now_ms, self.grace_s)
            if missed:
                self._missed(actor, missed)

    def _missed(self, actor: dramatiq.Actor[Any, Any], missed: list[int]) -> None:
        latest = missed[-1]
        policy = actor.options.get(opt.MISSED, "skip")
        if policy == "catch_up":
            # One catch-up message per latest missed tick, even if the check ran twice meanwhile.
            if not self.store.mark_once(f"catch-up:{actor.actor_name}:{latest}", retention_s=TICK_RETENTION_S):
                return
            logger.warning(
                "%s missed %d tick(s) while no scheduler ran; catching up once for %s.",
                actor.actor_name,
                len(missed),
                pendulum.from_timestamp(latest / 1000).to_iso8601_string(),
            )
            actor.send_with_options(
                scheduled_at=pendulum.now().replace(microsecond=0).to_iso8601_string(), catch_up_of=latest
            )
        else:
            if not self.store.claim_tick(actor.actor_name, latest, retention_s=TICK_RETENTION_S):
                return
            logger.warning("%s missed %d tick(s) while no scheduler ran; skipped.", actor.actor_name, len(missed))
        for listener in self.listeners:
            listener(actor.actor_name, len(missed))
