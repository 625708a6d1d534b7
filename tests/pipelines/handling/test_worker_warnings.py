"""Dramatiq warns that a result was discarded when an actor returns a value without a results backend:
a pipeline step's result is kept, so its warning is dropped; any other actor's still comes."""

from __future__ import annotations

import logging

import dramatiq
import pytest

from pipelines import chain, step
from tests.support.fixtures import MakeApp, StartWorker

DISCARDED = "returned a value that is not None"


def test_a_step_that_returns_a_value_is_not_warned_about_and_a_plain_actor_still_is(
    make_app: MakeApp, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    returned: list[str] = []

    @dramatiq.actor(broker=app.broker, actor_name="doubled")
    def doubled(value: int) -> int:
        return value * 2

    @dramatiq.actor(broker=app.broker, actor_name="plain")
    def plain() -> int:
        returned.append("plain")
        return 1

    start_worker(app)
    with caplog.at_level(logging.WARNING, logger="dramatiq.worker.WorkerThread"):
        run = app.start(chain(step(doubled, 1), step(doubled)))
        assert run.result(timeout_s=30) == 4
        plain.send()
        app.broker.join(plain.queue_name, timeout=30_000)
    warned = [record.getMessage() for record in caplog.records if DISCARDED in record.getMessage()]
    assert returned == ["plain"]
    assert [("'plain'" in warning) for warning in warned] == [True], warned
