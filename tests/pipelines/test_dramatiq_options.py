"""Every actor and message option of Dramatiq's documentation is taken as Dramatiq takes it, or refused
with a sentence saying what to use instead: none is silently ignored."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
import pytest

from pipelines.errors import DefinitionError
from tests.backends import only_on
from tests.fixtures import MakeApp, Observe, StartWorker

#: Dramatiq's documented actor options (its default middleware), each with a value it takes.
DRAMATIQ_ACTOR_OPTIONS: dict[str, Any] = {
    "max_age": 60_000,
    "time_limit": 10_000,
    "max_retries": 3,
    "min_backoff": 0,
    "max_backoff": 0,
    "retry_when": lambda retries, exception: retries < 2,
    "throws": (KeyError,),
    "on_retry_exhausted": "some_actor",
    "on_success": "some_actor",
    "on_failure": "some_actor",
    "pipe_ignore": True,
    "notify_shutdown": True,
    "priority": 10,
}


@pytest.mark.parametrize(("name", "value"), DRAMATIQ_ACTOR_OPTIONS.items(), ids=list(DRAMATIQ_ACTOR_OPTIONS))
def test_each_documented_dramatiq_actor_option_is_accepted_at_declaration(
    make_app: MakeApp, name: str, value: Any
) -> None:
    app = make_app()

    actor = dramatiq.actor(actor_name="optioned", queue_name="custom", broker=app.broker, **{name: value})(lambda: None)

    assert (actor.priority if name == "priority" else actor.options[name]) == value


def test_broker_priority_is_refused_on_an_actor_with_what_to_use_instead(make_app: MakeApp) -> None:
    app = make_app()

    with pytest.raises(DefinitionError, match=r"Actor 'urgent': broker_priority=5 is not supported.*HIGH_PRIORITY"):
        dramatiq.actor(actor_name="urgent", broker=app.broker, broker_priority=5)(lambda: None)


def test_broker_priority_is_refused_on_a_message_before_it_is_sent(make_app: MakeApp) -> None:
    app = make_app()
    urgent = dramatiq.actor(actor_name="urgent", broker=app.broker)(lambda n: None)

    with pytest.raises(DefinitionError, match=r"Message to 'urgent': broker_priority=9 is not supported"):
        urgent.send_with_options(args=(1,), broker_priority=9)


def test_a_dramatiq_pipeline_of_a_generic_actor_and_a_pipe_ignore_step_runs_as_in_dramatiq(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    seen: list[tuple[str, Any]] = []

    class Double(dramatiq.GenericActor):
        class Meta:
            actor_name = "double"
            broker = app.broker

        def perform(self, n: int) -> int:
            seen.append(("double", n))
            return n * 2

    @dramatiq.actor(broker=app.broker)
    def record(*args: Any) -> None:
        seen.append(("record", args))

    start_worker(app)
    steps = [Double.message(3), record.message(), record.message_with_options(args=("alone",), pipe_ignore=True)]
    dramatiq.pipeline(steps, broker=app.broker).run()  # type: ignore[no-untyped-call]
    observer.wait_handled("record", 2)

    assert seen == [("double", 3), ("record", (6,)), ("record", ("alone",))]


@only_on("rabbitmq")
def test_a_worker_booting_after_set_encoder_says_the_encoder_is_not_used(
    make_app: MakeApp, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    dramatiq.actor(actor_name="plain", broker=app.broker)(lambda: None)
    previous = dramatiq.get_encoder()
    dramatiq.set_encoder(dramatiq.PickleEncoder())
    try:
        with caplog.at_level(logging.WARNING):
            start_worker(app)
    finally:
        dramatiq.set_encoder(previous)

    assert any("set_encoder(PickleEncoder) is not used" in r.getMessage() for r in caplog.records)
