"""Correlation ids flow from the caller through every message of a run, and into every log line."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest

from pipelines import chain, chord, correlation, current_correlation_id, fan_out, for_each
from pipelines.context import MessageContext, enter_message, leave_message
from pipelines.observability import logs as pipeline_logs
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30


class Seen:
    def __init__(self) -> None:
        self.ids: dict[str, set[str | None]] = {}
        self._lock = threading.Lock()

    def record(self, actor: str) -> None:
        with self._lock:
            self.ids.setdefault(actor, set()).add(current_correlation_id())


def test_a_run_takes_the_callers_correlation_id_and_every_step_and_event_carries_it(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    observer = observe(app)
    seen = Seen()
    attempts: dict[str, int] = {}

    def recorder(name: str, result: Any = None, *, publish: bool = False, fail_once: bool = False) -> Any:
        def handle(*args: Any) -> Any:
            seen.record(name)
            if fail_once and not attempts.get(name):
                attempts[name] = 1
                raise ConnectionError("once")
            if publish:
                app.publish("thing.happened", {"by": name})
            return result

        return dramatiq.actor(actor_name=name, broker=app.broker, max_retries=1, min_backoff=1, max_backoff=5)(handle)

    first = recorder("first", 1)
    left = recorder("left", 2, fail_once=True)
    right = recorder("right", 3, publish=True)
    member = recorder("member", 4)
    callback = recorder("callback", 5)
    dramatiq.actor(actor_name="listener", broker=app.broker, subscribe=["thing.*"])(
        lambda event: seen.record("listener")
    )
    start_worker(app)

    with correlation("req-42"):
        run = app.start(chain(first, fan_out(left, right), chord(for_each(member, range(3)), then=callback)))
    assert run.result(timeout_s=TIMEOUT_S) == 5
    observer.wait_handled("listener", 1)

    assert seen.ids == {name: {"req-42"} for name in ("first", "left", "right", "member", "callback", "listener")}
    assert run.status().correlation_id == "req-42"


def test_without_a_caller_id_each_run_gets_its_own(make_app: MakeApp, start_worker: StartWorker) -> None:
    app = make_app()
    seen = Seen()
    a = dramatiq.actor(actor_name="a", broker=app.broker)(lambda: seen.record("a"))
    b = dramatiq.actor(actor_name="b", broker=app.broker)(lambda _: seen.record("b"))
    start_worker(app)

    runs = [app.start(chain(a, b)) for _ in range(2)]
    for run in runs:
        run.wait(TIMEOUT_S)

    ids = {run.status().correlation_id for run in runs}
    assert len(ids) == 2
    assert None not in ids
    assert seen.ids["a"] == seen.ids["b"] == ids


@pytest.fixture
def captured_json_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    previous = root.level
    pipeline_logs.install("json", "INFO")
    yield stream
    root.removeHandler(handler)
    root.setLevel(previous)


def test_every_log_line_written_while_a_message_runs_carries_its_ids(captured_json_logs: io.StringIO) -> None:
    logger = logging.getLogger("pipelines.test")
    enter_message(MessageContext("corr-1", "msg-1", "charge", 2, "run-1", "0.1"))
    logger.info("charging amqp://guest:secret@rabbit/")
    leave_message()
    logger.info("between messages")

    during, after = (json.loads(line) for line in captured_json_logs.getvalue().splitlines()[-2:])
    assert during["correlation_id"] == "corr-1"
    assert (during["run_id"], during["message_id"], during["actor"], during["attempt"]) == (
        "run-1",
        "msg-1",
        "charge",
        2,
    )
    assert during["message"] == "charging amqp://guest:***@rabbit/"
    assert "correlation_id" not in after


def test_records_keep_their_message_after_a_json_line_is_written_as_with_a_standard_formatter(
    caplog: pytest.LogCaptureFixture, captured_json_logs: io.StringIO
) -> None:
    logging.getLogger("pipelines.test").warning("added %s twice, to amqp://guest:secret@rabbit/", "Metrics")

    assert [record.message for record in caplog.records] == ["added Metrics twice, to amqp://guest:***@rabbit/"]


def test_pikas_connection_chatter_is_left_out_but_its_warnings_are_not(captured_json_logs: io.StringIO) -> None:
    pika_logger = logging.getLogger("pika.connection")
    pika_logger.info("Closing connection (200): 'Normal shutdown'")
    pika_logger.warning("Connection lost")

    lines = [json.loads(line) for line in captured_json_logs.getvalue().splitlines()]
    assert [line["message"] for line in lines if line["logger"] == "pika.connection"] == ["Connection lost"]
