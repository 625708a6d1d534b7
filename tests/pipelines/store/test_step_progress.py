"""StepProgress, on every backend: a running step's reports, and the run state they answer with."""

from __future__ import annotations

from collections.abc import Callable

from pipelines.store import NewRun, RunStore

NewChord = Callable[..., NewRun]


def test_a_report_is_recorded_in_the_step_and_answers_with_the_runs_state(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(2)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.1", attempt=1, lease_ms=60_000)

    first = store.report_progress(run.run_id, "0.0.1", 0.25, "1/4 files")
    second = store.report_progress(run.run_id, "0.0.1", 0.5, "")

    assert (first, second) == ("running", "running")
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.steps[1].progress, status.steps[1].progress_text) == (0.5, None)
    assert (status.steps[0].progress, status.steps[0].progress_text) == (None, None)


def test_a_report_without_a_fraction_records_nothing_and_tells_of_a_cancel(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=60_000)
    store.report_progress(run.run_id, "0.0.0", 0.1, "started")
    store.cancel_run(run.run_id)

    state = store.report_progress(run.run_id, "0.0.0", None, "ignored")

    assert state == "cancelled"
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.steps[0].progress, status.steps[0].progress_text) == (0.1, "started")


def test_a_report_for_an_unknown_run_answers_none_and_one_for_an_unknown_step_records_nothing(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(1)
    store.create_run(run)

    assert store.report_progress("no-such-run", "0.0.0", 0.5, "") is None
    assert store.report_progress(run.run_id, "9.9", 0.5, "") == "pending"
    status = store.get_run(run.run_id)
    assert status is not None
    assert [s.node for s in status.steps] == ["0.0.0", "0.1"]
