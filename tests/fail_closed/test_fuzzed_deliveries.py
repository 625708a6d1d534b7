"""Property: whatever is published into an actor's queue, each delivery has exactly one outcome.

Hypothesis generates bodies (bytes, JSON, messages with fields and options of any JSON type) and
headers, publishes them raw into a queue among valid messages, and the real consumer and worker
handle them: each input runs once, is dropped once (a duplicate key, a stale tick) or is dead-lettered
once; every valid message runs once; no consumer restarts; no dead letter is published twice. Bounded
(``FC_FUZZ_EXAMPLES``, 25 by default); the fixed corpus of known shapes is ``test_malformed_deliveries``.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.app import App
from tests.support.fail_closed.fail_closed_support import (
    ConsumerRestarts,
    Ledger,
    RawPublisher,
    body,
    dead_letters_by_id,
    declare_sink,
)
from tests.support.fixtures import MakeApp, StartWorker

EXAMPLES = int(os.environ.get("FC_FUZZ_EXAMPLES", "25"))
SETTLE_S = 15

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
#: Every option something reads, and a few nobody does.
OPTION_NAMES = [
    "pipeline_step", "pipeline_branches", "retries", "max_retries", "min_backoff", "max_backoff", "time_limit",
    "max_age", "eta", "idempotency_key", "idempotency_done", "schema_version", "pipeline_result", "pipeline_failure",
    "scheduled_at", "catch_up_of", "partition", "correlation_id", "trace_context", "trace_links", "on_success",
    "on_failure", "pipe_target", "pipe_ignore", "throws", "sealed", "event_topic", "custom",
]  # fmt: skip
#: Values of the right shape, so that inputs get past screening and meet the middleware too.
PLAUSIBLE = st.sampled_from(
    [
        {"run": "nope", "node": "0.0", "up": []},
        0,
        3,
        1,
        "2026-12-01T10:00:00+00:00",
        "key",
        {"traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"},
        "sink",
        True,
        "[1]",
        -5.5,
    ]
)
options = st.dictionaries(st.sampled_from(OPTION_NAMES), PLAUSIBLE | json_values, max_size=3)
headers = st.none() | st.fixed_dictionaries({"x-delivery-count": st.none() | st.integers(-2, 5) | st.text(max_size=3)})
FIELDS = ["queue_name", "actor_name", "args", "kwargs", "options", "message_timestamp"]


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Callable[[str], bytes], dict[str, Any] | None]:
    """A body (made for a marker, which travels as its message id) and headers."""
    kind = draw(st.sampled_from(["bytes", "json", "message"]))
    if kind == "bytes":
        raw = draw(st.binary(max_size=40))
        return (lambda _m: raw), draw(headers)
    if kind == "json":
        value = draw(json_values)
        return (lambda _m: orjson.dumps(value)), draw(headers)
    fields: dict[str, Any] = draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=2))
    chosen: dict[str, Any] = draw(options)
    return (lambda m: body(m, **({"options": chosen} | fields))), draw(headers)


@pytest.mark.timeout(EXAMPLES * (SETTLE_S + 5) + 60)
def test_every_fuzzed_delivery_has_exactly_one_outcome_and_valid_messages_run_once(
    make_app: MakeApp,
    start_worker: StartWorker,
    ledger: Callable[[App], Ledger],
    raw_publisher: RawPublisher,
    consumer_restarts: ConsumerRestarts,
) -> None:
    app = make_app()
    declare_sink(app)
    seen = ledger(app)
    queue = app.broker.topology.actor_queues["sink"]
    start_worker(app)
    counter = itertools.count()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(inputs(), min_size=1, max_size=4))
    def one_batch(batch: list[tuple[Callable[[str], bytes], dict[str, Any] | None]]) -> None:
        fuzzed = {}
        valid = []
        for make_body, headers_ in batch:
            marker = f"f{next(counter)}"
            fuzzed[marker] = make_body(marker)
            raw_publisher.publish(queue, fuzzed[marker], message_id=marker, headers=headers_)
            ok = f"v{next(counter)}"
            valid.append(ok)
            raw_publisher.publish(queue, body(ok), message_id=ok)

        def outcomes(marker: str, letters: Counter[str]) -> int:
            return seen.ran[marker] + seen.dropped[marker] + letters[marker]

        def settled() -> bool:
            letters = dead_letters_by_id(app)
            return all(seen.ran[m] for m in valid) and all(outcomes(m, letters) for m in fuzzed)

        deadline = time.monotonic() + SETTLE_S
        while not settled() and time.monotonic() < deadline:
            seen.wait(lambda: False, 0.2)
        letters = dead_letters_by_id(app)
        assert {m: seen.ran[m] for m in valid} == dict.fromkeys(valid, 1)
        problems = {
            m: (fuzzed[m][:120], seen.ran[m], seen.dropped[m], letters[m]) for m in fuzzed if outcomes(m, letters) != 1
        }
        assert problems == {}
        assert consumer_restarts.restarts == 0, consumer_restarts.errors[:3]

    one_batch()
    letters = dead_letters_by_id(app)
    print(
        f"\nfigures: fuzz: {next(counter) // 2} inputs, dead letters {sum(letters.values())}, "
        f"published twice {sum(c > 1 for c in letters.values())}, consumer restarts {consumer_restarts.restarts}"
    )
    assert all(count == 1 for count in letters.values())
