"""A step's history and logs as a worker records them: each attempt and replay, and what the step logged."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import dramatiq
import pytest

from pipelines import chain
from pipelines.app import App
from tests.support.fixtures import MakeApp, Observe, StartWorker

TIMEOUT_S = 30
RETRY_FAST = {"max_retries": 1, "min_backoff_s": 0.01, "max_backoff_s": 0.02}


@pytest.fixture
def shop_log() -> Iterator[logging.Logger]:
    """The example domain's logger, at INFO whatever the root logger's level."""
    logger = logging.getLogger("tests.shop")
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(logging.NOTSET)


def declare_charge(
    app: App, logger: logging.Logger, fail_first: int
) -> tuple[dramatiq.Actor[..., int], dramatiq.Actor[..., int], list[int]]:
    calls: list[int] = []

    @dramatiq.actor(broker=app.broker)
    def charge(amount: int) -> int:
        calls.append(amount)
        logger.info("charging %s through amqp://shop:s3cret@bank.example/", amount)
        helper = threading.Thread(target=lambda: logger.info("a helper thread of the step logs this"))
        helper.start()
        helper.join()
        if len(calls) <= fail_first:
            raise RuntimeError("the bank timed out")
        return amount

    @dramatiq.actor(broker=app.broker)
    def receipt(amount: int) -> int:
        return amount

    return charge, receipt, calls


def test_a_step_keeps_what_its_own_thread_logged_masked_with_each_attempt_in_its_history(
    make_app: MakeApp, start_worker: StartWorker, shop_log: logging.Logger
) -> None:
    app = make_app(retries=RETRY_FAST)
    charge, receipt, _ = declare_charge(app, shop_log, fail_first=1)
    start_worker(app)

    status = app.start(chain(charge, receipt), args=(5,)).wait(TIMEOUT_S)

    assert status.state == "succeeded"
    step = status.steps[0]
    assert [(h.kind, h.attempt, h.outcome, h.error) for h in step.history] == [
        ("attempt", 1, "retrying", "RuntimeError: the bank timed out"),
        ("attempt", 2, "succeeded", None),
    ]
    assert all(h.worker and h.ended_at_ms and h.ended_at_ms >= h.at_ms for h in step.history)
    logs = app.store.step_logs(status.run_id, [s.node for s in status.steps])
    assert list(logs) == [step.node]  # the receipt logged nothing
    first, second = logs[step.node]
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.records[0].text == "charging 5 through amqp://shop:***@bank.example/"
    assert (first.records[0].level, first.records[0].logger) == ("INFO", "tests.shop")
    failure = next(r for r in first.records if r.level == "ERROR")
    assert "Traceback" in failure.text
    assert "RuntimeError: the bank timed out" in failure.text
    assert [r.text for r in second.records] == ["charging 5 through amqp://shop:***@bank.example/"]
    assert not any("helper thread" in r.text for attempt in (first, second) for r in attempt.records)


def test_a_dead_letter_replay_is_listed_in_its_steps_history_between_its_attempts(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, shop_log: logging.Logger
) -> None:
    app = make_app(retries={**RETRY_FAST, "max_retries": 0})
    observer = observe(app)
    charge, receipt, _ = declare_charge(app, shop_log, fail_first=1)
    start_worker(app)
    run = app.start(chain(charge, receipt), args=(7,))
    assert run.wait(TIMEOUT_S).state == "failed"
    observer.wait_dead_lettered("charge", 1)
    [letter] = app.dead_letters.list("charge")

    assert app.dead_letters.replay(letter.id) == "replayed"

    status = run.wait(TIMEOUT_S)
    assert status.state == "succeeded"
    assert [(h.kind, h.attempt, h.outcome) for h in status.steps[0].history] == [
        ("attempt", 1, "failed"),
        ("replay", None, None),
        ("attempt", 2, "succeeded"),
    ]
    assert status.steps[0].history[1].error == f"dead letter {letter.id} (retries exhausted)"


def test_steps_keep_no_logs_when_store_step_log_records_is_0(
    make_app: MakeApp, start_worker: StartWorker, shop_log: logging.Logger
) -> None:
    app = make_app(store={"step_log_records": 0})
    charge, receipt, calls = declare_charge(app, shop_log, fail_first=0)
    start_worker(app)

    status = app.start(chain(charge, receipt), args=(1,)).wait(TIMEOUT_S)

    assert (status.state, calls) == ("succeeded", [1])
    assert app.store.step_logs(status.run_id, [s.node for s in status.steps]) == {}
    assert [h.outcome for h in status.steps[0].history] == ["succeeded"]
