"""``pipelines scheduler``: periodiq's scheduler, kept running through RabbitMQ outages.

Stock ``periodiq`` exits when a publish fails at a tick (the exception reaches its entry point), so a
broker outage at a tick stops every scheduler at once. This one takes the same arguments and uses
periodiq's cron and timing, but sends a tick's messages with retries: one log line per failed
attempt (no traceback), backoff between attempts, for as long as the tick is still due (the worker
skips a tick message older than ``SCHEDULE_SKIP_DELAY_S``, and never past the job's next tick). A
tick it gives up on is one no scheduler sent: the check job counts it as missed and applies the
job's ``missed`` policy.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import dramatiq
import pendulum
import periodiq
from dramatiq.cli import LOGFORMAT, VERBOSITY, import_broker

from pipelines import options as opt
from pipelines.app import current_app
from pipelines.errors import BrokerAccessRefused, ConfigError, DefinitionError, PipelinesError, ServiceUnavailable
from pipelines.observability import logs
from pipelines.schedules.ticks import SCHEDULE_SKIP_DELAY_S

logger = logging.getLogger("pipelines.scheduler")

#: First pause between two attempts at sending a tick, in seconds (doubled each time).
FIRST_BACKOFF_S = 1.0
#: Longest pause between two attempts, in seconds.
MAX_BACKOFF_S = 8.0
#: periodiq starts a scheduler this late in a minute at the next one.
LATE_IN_MINUTE_S = 55


class Scheduler(periodiq.Scheduler):  # type: ignore[misc]
    """periodiq's scheduler whose sends survive a broker that does not answer (see the module)."""

    def __init__(
        self,
        actors: Sequence[dramatiq.Actor[Any, Any]],
        *,
        due_for_s: float = SCHEDULE_SKIP_DELAY_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(actors=list(actors))
        self.due_for_s = due_for_s
        self.sleep = sleep

    def send_actors(self, actors: Sequence[dramatiq.Actor[Any, Any]], now: pendulum.DateTime) -> None:
        """Send tick ``now`` of ``actors``, retrying those whose publish fails while the tick is due."""
        pending = list(actors)
        if not pending:
            return
        due_until = min(
            [now.add(seconds=self.due_for_s), *(a.options[opt.PERIODIC].next_valid_date(now) for a in pending)]
        )
        backoff_s, attempt = FIRST_BACKOFF_S, 1
        while True:
            pending, error = self._send(pending, now)
            if not pending:
                return
            names = ", ".join(a.actor_name for a in pending)
            if pendulum.now().add(seconds=backoff_s) >= due_until:
                logger.error(
                    "Tick %s of %s not sent (attempt %d: %s); no longer due, so the check job counts it as missed.",
                    now,
                    names,
                    attempt,
                    error,
                )
                return
            logger.warning(
                "Tick %s of %s not sent (attempt %d: %s); retrying in %.0f s.", now, names, attempt, error, backoff_s
            )
            self.sleep(backoff_s)
            backoff_s, attempt = min(2 * backoff_s, MAX_BACKOFF_S), attempt + 1

    @staticmethod
    def _send(
        actors: list[dramatiq.Actor[Any, Any]], now: pendulum.DateTime
    ) -> tuple[list[dramatiq.Actor[Any, Any]], Exception | None]:
        """Send each actor's tick message; returns the actors whose publish failed, and the last error."""
        failed: list[dramatiq.Actor[Any, Any]] = []
        error: Exception | None = None
        for actor in actors:
            try:
                actor.send_with_options(scheduled_at=str(now))
            except BrokerAccessRefused:
                raise  # a login RabbitMQ refuses will not work on a retry: stop with the reason
            except (ServiceUnavailable, dramatiq.errors.BrokerError) as e:
                failed.append(actor)
                error = e
            else:
                logger.info("Sent tick %s of %s.", now, actor.actor_name)
        return failed, error


def _quiet_logs() -> None:
    """The app's log format and level, and pika kept quiet as in `dramatiq` workers: its errors come
    with tracebacks, and the scheduler's own line per attempt says what went wrong."""
    try:
        settings = current_app().settings
    except DefinitionError:
        pass  # a broker not built by pipelines.configure(): periodiq's text lines
    else:
        logs.install(settings.logging.format, settings.logging.level)
    logging.getLogger("pika").setLevel(logging.CRITICAL)


def main(argv: Sequence[str]) -> int:
    """``pipelines scheduler BROKER [MODULE ...] [--path ...] [-v]``: periodiq's arguments."""
    logging.basicConfig(level=logging.INFO, format=LOGFORMAT)
    parser = periodiq.make_argument_parser()
    parser.prog = "pipelines scheduler"
    parser.description = "Send scheduled actors' ticks (periodiq), through RabbitMQ outages."
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(VERBOSITY.get(args.verbose, logging.DEBUG))
    for path in args.path:
        sys.path.insert(0, path)
    try:
        _, broker = import_broker(args.broker)  # type: ignore[no-untyped-call]
        for module in args.modules:
            importlib.import_module(module)
    except ImportError as e:
        logger.error("Cannot import the actors: %s. Name the module that declares them (and --path).", e)
        return 2
    except (ConfigError, DefinitionError) as e:
        logger.error("%s", e)
        return 2
    _quiet_logs()
    try:
        actors = [a for a in broker.actors.values() if opt.PERIODIC in a.options]
        if not actors:
            logger.error("No scheduled actor (periodic=cron(...)) in %s: nothing to schedule.", args.broker)
            return 1
        periodiq.print_periodic_actors(actors)
        scheduler = Scheduler(actors)
        second = pendulum.now().second
        if second > LATE_IN_MINUTE_S:
            time.sleep(60 - second)
        scheduler.schedule()
        scheduler.loop()
    except PipelinesError as e:
        logger.error("%s", e)
        return 1
    except KeyboardInterrupt:
        logger.info("Interrupted.")
    return 0
