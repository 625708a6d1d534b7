"""Capturing a step's log records: the newest within the bounds, masked, cut, and only from the step's context."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from pipelines.handling import step_logs
from pipelines.handling.step_logs import RECORD_CHARS, StepLogCapture


@pytest.fixture
def shop() -> Iterator[logging.Logger]:
    """A logger at INFO whose records reach a capture handler of its own (not the root's)."""
    logger = logging.getLogger("tests.capture")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = StepLogCapture()
    logger.addHandler(handler)
    yield logger
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
    step_logs.stop()


def test_an_attempt_keeps_its_newest_records_and_counts_the_dropped_ones(shop: logging.Logger) -> None:
    step_logs.start(attempt=3, max_records=2, max_bytes=4096)
    for number in range(5):
        shop.info("record %d", number)

    log = step_logs.stop()

    assert log is not None
    assert (log.attempt, log.dropped) == (3, 3)
    assert [(r.level, r.logger, r.text) for r in log.records] == [
        ("INFO", "tests.capture", "record 3"),
        ("INFO", "tests.capture", "record 4"),
    ]
    assert step_logs.stop() is None  # nothing is captured any more


def test_records_are_kept_within_the_bytes_whatever_their_number(shop: logging.Logger) -> None:
    step_logs.start(attempt=1, max_records=100, max_bytes=4096)
    for number in range(10):
        shop.warning("%d %s", number, "x" * 1000)

    log = step_logs.stop()

    assert log is not None
    assert sum(record.size() for record in log.records) <= 4096
    assert [record.text[0] for record in log.records] == ["7", "8", "9"]
    assert log.dropped == 7


def test_a_records_secrets_are_masked_and_a_long_one_keeps_its_start_and_end(shop: logging.Logger) -> None:
    step_logs.start(attempt=1, max_records=10, max_bytes=65_536)
    shop.info("connecting to redis://:hunter2@cache:6379/0")
    error = ValueError("start " + "y" * 5000 + " end")
    shop.error("failed", exc_info=(ValueError, error, None))

    log = step_logs.stop()

    assert log is not None
    masked, failed = log.records
    assert masked.text == "connecting to redis://:***@cache:6379/0"
    assert len(failed.text) == RECORD_CHARS + len(" … ")
    assert failed.text.startswith("failed\nValueError: start yyy")
    assert failed.text.endswith("y end")


def test_other_threads_and_records_outside_a_step_are_not_captured(shop: logging.Logger) -> None:
    shop.info("before the step")
    step_logs.start(attempt=1, max_records=10, max_bytes=65_536)
    helper = threading.Thread(target=lambda: shop.info("from another thread"))
    helper.start()
    helper.join()
    shop.info("the step's own")

    log = step_logs.stop()
    shop.info("after the step")

    assert log is not None
    assert [record.text for record in log.records] == ["the step's own"]
