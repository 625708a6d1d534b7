"""Each option is read by one typed reader, which refuses a value of the wrong type naming the option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pipelines.wire import option_values as wire_options
from pipelines.wire.option_values import MalformedOption

READERS: list[tuple[Callable[[dict[str, Any]], Any], str, Any, Any, Any]] = [
    # reader, option, a good value, what the reader gives for it, a bad value
    (wire_options.retries, "retries", 2, 2, "2"),
    (wire_options.attempt, "retries", 2, 3, -1),
    (wire_options.time_limit_ms, "time_limit", 1500, 1500.0, "1500"),
    (wire_options.eta_ms, "eta", 1.5e12, 1.5e12, "soon"),
    (wire_options.catch_up_of, "catch_up_of", 1_800_000_000_000, 1_800_000_000_000, 1.5),
    (wire_options.partition, "partition", 3, 3, True),
    (wire_options.pipeline, "pipeline_name", "daily", "daily", 7),
    (wire_options.scheduled_at, "scheduled_at", "2026-12-01T10:00:00+00:00", "2026-12-01T10:00:00+00:00", "soon"),
    (wire_options.schema_version, "schema_version", 2, 2, 0),
]


@pytest.mark.parametrize(
    ("reader", "option", "good", "read", "bad"), READERS, ids=lambda v: getattr(v, "__name__", None)
)
def test_a_reader_gives_the_typed_value_and_refuses_a_bad_one_naming_its_option(
    reader: Callable[[dict[str, Any]], Any], option: str, good: Any, read: Any, bad: Any
) -> None:
    assert reader({option: good}) == read
    with pytest.raises(MalformedOption, match=f"option '{option}' is") as refused:
        reader({option: bad})
    assert refused.value.option == option


@pytest.mark.parametrize(
    ("reader", "absent"), [(wire_options.retries, 0), (wire_options.attempt, 1), (wire_options.pipeline, None)]
)
def test_an_absent_option_reads_as_its_default(reader: Callable[[dict[str, Any]], Any], absent: Any) -> None:
    assert reader({}) == absent
