"""Log lines in both formats: the message context added, secrets masked, one record per line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from pipelines.observability import logs

PASSWORD = "pa/ss w'rd"
URL = f"redis://app:{PASSWORD}@cache.internal:6379/0"
FORGED = "2026-12-03 09:00:00,000 CRITICAL pipelines [None None None] forged: all runs deleted"


@pytest.fixture(params=["text", "json"])
def written(request: pytest.FixtureRequest) -> Iterator[tuple[str, logging.Logger, io.StringIO]]:
    """A logger writing through the formatter ``logs.install`` uses for that format."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter() if request.param == "json" else logs.TextFormatter())
    handler.addFilter(logs.MessageContextFilter())
    logger = logging.getLogger(f"tests.logs.{request.param}")
    logger.addHandler(handler)
    logger.propagate = False
    yield request.param, logger, out
    logger.removeHandler(handler)


def test_a_password_in_the_message_and_in_a_traceback_is_masked(
    written: tuple[str, logging.Logger, io.StringIO],
) -> None:
    _, logger, out = written

    logger.error("Could not reach %s", URL)
    logger.error("The store is down", exc_info=ConnectionError(f"refused by {URL}"))

    text = out.getvalue()
    assert PASSWORD not in text
    assert text.count("redis://app:***@cache.internal:6379/0") == 2


def test_a_line_break_in_a_message_cannot_start_a_record_of_its_own(
    written: tuple[str, logging.Logger, io.StringIO],
) -> None:
    kind, logger, out = written

    logger.warning("payload rejected: %s", f"x\n{FORGED}\r\n{FORGED}")
    logger.error("step failed", exc_info=ValueError(f"bad value\n{FORGED}"))

    lines = out.getvalue().splitlines()
    records = [line for line in lines if not line.startswith(logs.TRACEBACK_INDENT)]
    if kind == "json":
        assert [orjson.loads(line)["level"] for line in lines] == ["WARNING", "ERROR"]
        assert FORGED in orjson.loads(lines[0])["message"]
    else:
        assert [record.split()[2] for record in records] == ["WARNING", "ERROR"]
        assert "x\\n" + FORGED + "\\r\\n" + FORGED in records[0]
        assert any(line == f"{logs.TRACEBACK_INDENT}{FORGED}" for line in lines)
