"""A middleware that guards a guarantee and fails stops the actor; only observability fails open.

A user's middleware stands for any guard (a claim, a key, a lease): when its ``before_process_message``
raises, the actor does not run, and the message is dead-lettered as ``<Middleware> failed`` (put off and
run later, when the error is transient); when its ``after_process_message`` raises, the message is
dead-lettered rather than acknowledged as if the guard had done its part. On both brokers; about 6 s
on each, most of it the put-off message's wait.
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
import pytest

import pipelines
from pipelines.app import App
from pipelines.errors import StoreUnavailable
from pipelines.middleware import Metrics
from tests.support.backends import Backend
from tests.support.fixtures import MakeApp, Observe, StartWorker


class Guard(dramatiq.Middleware):
    """Fails in its ``before_`` or ``after_process_message`` hook, ``times`` times, with ``error``."""

    def __init__(self, *, before: Exception | None = None, after: Exception | None = None, times: int = 1) -> None:
        self.before = before
        self.after = after
        self.times = times

    def _fail(self, error: Exception | None) -> None:
        if error is not None and self.times > 0:
            self.times -= 1
            raise error

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._fail(self.before)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._fail(self.after)


class Telemetry(Guard):
    """Observability: its failures are logged and the message goes on."""

    fails_open = True


def declare(app: App, ran: list[int]) -> dramatiq.Actor[Any, Any]:
    @dramatiq.actor(broker=app.broker, max_retries=3)
    def charge(order_id: int) -> None:
        ran.append(order_id)

    return charge


def test_a_guard_that_raises_before_the_actor_stops_it_and_dead_letters_the_message_with_its_name(
    backend: Backend, make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int] = []
    charge = declare(app, ran)
    app.broker.add_middleware(Guard(before=RuntimeError("the claim script is missing")))
    start_worker(app)

    sent = charge.send(1)
    observer.wait_dead_lettered("charge", 1)

    [letter] = app.dead_letters.list()
    assert (letter.id, letter.reason.reason) == (sent.message_id, "Guard failed")
    assert (letter.reason.error_type, letter.reason.error) == ("RuntimeError", "the claim script is missing")
    assert ran == []  # not run, not retried


def test_a_guard_that_cannot_decide_yet_puts_the_message_off_and_it_runs_once_later(
    backend: Backend, make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int] = []
    charge = declare(app, ran)
    app.broker.add_middleware(Guard(before=StoreUnavailable("Redis did not answer (injected)")))
    start_worker(app)

    charge.send(2)
    observer.wait_handled("charge", 2)  # skipped once (put off), then run

    assert ran == [2]
    assert observer.skipped == {"charge": 1}
    assert app.dead_letters.list() == []


def test_a_guard_that_raises_after_the_actor_dead_letters_the_message_instead_of_acknowledging_it(
    backend: Backend, make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int] = []
    charge = declare(app, ran)
    app.broker.add_middleware(Guard(after=RuntimeError("the result was not recorded")))
    start_worker(app)

    sent = charge.send(3)
    observer.wait_dead_lettered("charge", 1)

    [letter] = app.dead_letters.list()
    assert (letter.id, letter.reason.reason) == (sent.message_id, "Guard failed")
    assert letter.reason.error == "the result was not recorded"
    assert ran == [3]  # it ran once; what the guard did not do after it is in the dead letter, not retried


def test_only_observability_fails_open(
    backend: Backend, make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    ran: list[int] = []
    charge = declare(app, ran)
    failing = RuntimeError("the exporter is down")
    app.broker.add_middleware(Telemetry(before=failing, after=failing, times=2))
    start_worker(app)

    charge.send(4)
    observer.wait_handled("charge", 1)

    assert ran == [4]
    assert observer.dead_lettered == {}
    assert app.dead_letters.list() == []


@pipelines.observational
class ErrorReporter(Guard):
    """A user's own error reporting, marked observational: it must never stop a message."""


def test_a_users_middleware_marked_observational_that_raises_is_logged_and_counted_and_the_actor_runs(
    backend: Backend,
    make_app: MakeApp,
    start_worker: StartWorker,
    observe: Observe,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app(metrics={"enabled": True, "multiprocess": False})
    metrics = next(m for m in app.broker.middleware if isinstance(m, Metrics))
    metrics._setup()
    observer = observe(app)
    ran: list[int] = []
    charge = declare(app, ran)
    failing = RuntimeError("the error tracker is down")
    with caplog.at_level(logging.INFO, logger="dramatiq"):
        app.broker.add_middleware(ErrorReporter(before=failing, after=failing, times=2))
    assert "ErrorReporter guards" not in caplog.text  # marked: nothing to warn of
    start_worker(app)

    charge.send(5)
    observer.wait_handled("charge", 1)

    assert ran == [5]
    assert app.dead_letters.list() == []
    logged = [r for r in caplog.records if r.levelno == logging.ERROR and "ErrorReporter failed" in r.getMessage()]
    assert sorted(r.getMessage().split()[3] for r in logged) == ["after_process_message", "before_process_message"]
    counts = {
        hook: metrics.registry.get_sample_value(
            "pipelines_middleware_failures_total", {"middleware": "ErrorReporter", "hook": hook}
        )
        for hook in ("before_process_message", "after_process_message")
    }
    assert counts == {"before_process_message": 1.0, "after_process_message": 1.0}


def test_a_users_middleware_that_does_not_say_it_observes_is_told_once_that_it_guards_every_message(
    backend: Backend, make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    with caplog.at_level(logging.INFO, logger="dramatiq"):
        app.broker.add_middleware(Guard())
    [told] = [r for r in caplog.records if "guards every message" in r.getMessage()]
    assert told.levelno == logging.INFO
    assert "Mark it @pipelines.observational" in told.getMessage()
