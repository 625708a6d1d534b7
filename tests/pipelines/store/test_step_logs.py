"""StepLogs, on every backend: what a step's attempts logged, kept with the step within the store's bounds."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pipelines.config.sections import StoreConfig
from pipelines.errors import ClaimLost
from pipelines.store import NewRun, RedisRunStore, RunStore, make_store
from pipelines.store.step_history import AttemptLog, LogRecord
from pipelines.wire.steps import Frame
from tests.support.backends import STORE_KINDS
from tests.support.housekeeping import delete_store

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000
CALLBACK = [Frame("c", "0", 1, 2)]


def logged(attempt: int, *texts: str, dropped: int = 0) -> AttemptLog:
    records = tuple(LogRecord(1_764_806_400_123 + i, "INFO", "shop", text) for i, text in enumerate(texts))
    return AttemptLog(attempt, records, dropped)


@pytest.fixture
def small_store(store_backend: str, store_namespace: str) -> Iterator[RunStore]:
    """A store whose steps keep 3 log records at most."""
    config = StoreConfig(**STORE_KINDS[store_backend].settings(store_namespace), retention_s=3600, step_log_records=3)
    made = make_store(config, namespace=store_namespace)
    yield made
    delete_store(made)
    made.close()


def test_each_attempt_keeps_what_it_logged_with_its_end(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    store.fail_step(run.run_id, "0.1", "ValueError: no", final=False, claim=1, logs=logged(1, "charging", "declined"))
    store.claim_step(run.run_id, "0.1", attempt=2, lease_ms=LEASE_MS)
    store.complete_step(run.run_id, "0.1", CALLBACK, "1", claim=2, logs=logged(2, "charged 5 €", dropped=4))

    kept = store.step_logs(run.run_id, ["0.0.0", "0.1", "9.9"])

    assert kept == {"0.1": (logged(1, "charging", "declined"), logged(2, "charged 5 €", dropped=4))}
    assert store.step_logs(run.run_id, []) == {}
    assert store.step_logs("no-such-run", ["0.1"]) == {}


def test_an_attempt_that_lost_its_claim_keeps_no_logs(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=1)
    store.claim_step(run.run_id, "0.1", attempt=2, lease_ms=LEASE_MS)

    store.complete_step(run.run_id, "0.1", CALLBACK, "1", claim=1, logs=logged(1, "late"))

    assert store.step_logs(run.run_id, ["0.1"]) == {}


def overtaken(store: RunStore, new_chord: NewChord) -> NewRun:
    """A run of one step claimed by attempt 1, then by its retry (attempt 2) while 1's lease is live."""
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    store.claim_step(run.run_id, "0.1", attempt=2, lease_ms=LEASE_MS)
    return run


def test_a_failed_attempt_its_retry_overtook_ends_its_own_entry_and_keeps_its_logs_in_attempt_order(
    store: RunStore, new_chord: NewChord
) -> None:
    # Backoff schedules the retry before the failure is recorded: the retry can claim the step, and even
    # finish it, first.
    run = overtaken(store, new_chord)
    store.complete_step(run.run_id, "0.1", CALLBACK, "1", claim=2, logs=logged(2, "charged"))

    with pytest.raises(ClaimLost):
        store.fail_step(run.run_id, "0.1", "ValueError: no", final=False, claim=1, logs=logged(1, "declined"))

    status = store.get_run(run.run_id)
    assert status is not None
    step = next(s for s in status.steps if s.node == "0.1")
    assert (step.state, step.attempts, step.error) == ("succeeded", 2, None)
    assert [(h.attempt, h.outcome, h.error) for h in step.history] == [
        (1, "retrying", "ValueError: no"),
        (2, "succeeded", None),
    ]
    assert status.state == "succeeded"
    assert store.step_logs(run.run_id, ["0.1"]) == {"0.1": (logged(1, "declined"), logged(2, "charged"))}


def test_an_overtaken_attempts_final_failure_fails_neither_its_step_nor_its_run(
    store: RunStore, new_chord: NewChord
) -> None:
    run = overtaken(store, new_chord)

    with pytest.raises(ClaimLost):
        store.fail_step(run.run_id, "0.1", "ValueError: no", final=True, claim=1)

    status = store.get_run(run.run_id)
    assert status is not None
    step = next(s for s in status.steps if s.node == "0.1")
    assert (status.state, step.state) == ("running", "running")
    assert [(h.attempt, h.outcome) for h in step.history] == [(1, "failed"), (2, None)]


def test_a_step_keeps_its_newest_attempts_logs_within_the_bounds(small_store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    small_store.create_run(run)
    for attempt, texts in enumerate((("a", "b"), ("c", "d"), ("e", "f", "g")), start=1):
        small_store.claim_step(run.run_id, "0.1", attempt=attempt, lease_ms=LEASE_MS)
        small_store.fail_step(run.run_id, "0.1", "E: x", final=False, claim=attempt, logs=logged(attempt, *texts))

    kept = small_store.step_logs(run.run_id, ["0.1"])

    assert kept == {"0.1": (logged(3, "e", "f", "g"),)}


def test_logs_stay_with_their_step_after_its_run_ended(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)

    store.fail_step(run.run_id, "0.1", "E: x", final=True, claim=1, logs=logged(1, "gone"))

    assert store.run_state(run.run_id) == "failed"
    assert store.step_logs(run.run_id, ["0.1"]) == {"0.1": (logged(1, "gone"),)}


def test_logs_end_with_their_run_and_keep_its_retention(script_store: RedisRunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    script_store.create_run(run)
    script_store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    script_store.fail_step(run.run_id, "0.1", "E: x", final=True, claim=1, logs=logged(1, "gone"))

    ttl_ms = script_store._redis.pttl(f"{script_store._key(run.run_id)}:logs")
    assert 3_500_000 < ttl_ms <= 3_600_000
