"""RunSteps' deadlines, on every backend: a run past its deadline is failed, naming the step that ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pipelines.store import NewRun, RunStore
from tests.support.store_time import pass_deadline

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000


def test_a_run_before_its_deadline_is_left_running(store: RunStore, new_chord: NewChord) -> None:
    run = dataclasses.replace(new_chord(1), deadline_s=60)
    store.create_run(run)

    check = store.enforce_deadline(run.run_id)

    assert check.kind == "wait"
    assert 0 <= check.wait_ms <= 60_000
    assert store.run_state(run.run_id) == "pending"
    assert store.enforce_deadline(new_chord(1).run_id).kind == "none"  # unknown run


def test_a_run_past_its_deadline_fails_naming_its_running_step_whose_reports_then_raise(
    store: RunStore, new_chord: NewChord
) -> None:
    run = dataclasses.replace(new_chord(2), deadline_s=60)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.1", attempt=1, lease_ms=LEASE_MS)
    pass_deadline(store, run.run_id)

    check = store.enforce_deadline(run.run_id)

    assert (check.kind, check.step) == ("failed", "0.0.1")
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.error, status.failed_step) == ("failed", "deadline exceeded", "0.0.1")
    assert {s.node: s.state for s in status.steps}["0.0.1"] == "failed"
    assert store.report_progress(run.run_id, "0.0.1", 0.5, "half") == "failed"
    assert store.enforce_deadline(run.run_id).kind == "none"  # ended: nothing more to do


def test_a_progress_report_past_the_deadline_tells_the_step(store: RunStore, new_chord: NewChord) -> None:
    run = dataclasses.replace(new_chord(1), deadline_s=60)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    pass_deadline(store, run.run_id)

    assert store.report_progress(run.run_id, "0.0.0", None, "") == "deadline"
