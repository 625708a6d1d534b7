"""StepReplays, on every backend: a dead-lettered step reopened in its run, or why it cannot be."""

from __future__ import annotations

from collections.abc import Callable

from pipelines.store import NewRun, RunStore
from pipelines.wire.steps import Frame

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000


def test_reopening_the_step_that_failed_a_run_runs_the_run_again(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(2)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.1", attempt=1, lease_ms=LEASE_MS)
    store.fail_step(run.run_id, "0.0.1", "ValueError: bad input", final=True)

    outcome = store.reopen_step(run.run_id, "0.0.1")

    assert outcome == ("reopened", None)
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.error, status.failed_step, status.finished_at_ms) == ("running", None, None, None)
    assert (status.steps[1].state, status.steps[1].error, status.steps[1].finished_at_ms) == ("retrying", None, None)
    assert store.claim_step(run.run_id, "0.0.1", attempt=1, lease_ms=LEASE_MS).kind == "run"


def test_a_step_that_succeeded_is_done_and_a_cancelled_or_unknown_run_cannot_reopen(
    store: RunStore, new_chord: NewChord
) -> None:
    done, cancelled = new_chord(2), new_chord(1)
    store.create_runs([done, cancelled])
    store.claim_step(done.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(done.run_id, "0.0.0", [Frame("p", "0.0", 0, 2), Frame("c", "0", 0, 2)], "1")
    store.cancel_run(cancelled.run_id)

    assert store.reopen_step(done.run_id, "0.0.0") == ("done", None)
    assert store.reopen_step(cancelled.run_id, "0.0.0") == ("stopped", "cancelled")
    assert store.reopen_step(done.run_id, "9.9") == ("missing", None)
    assert store.reopen_step("no-such-run", "0.0.0") == ("missing", None)
    status = store.get_run(cancelled.run_id)
    assert status is not None
    assert status.state == "cancelled"


def test_a_steps_history_lists_its_attempts_and_the_replay_between_them(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS, worker="host:1/2")
    store.fail_step(run.run_id, "0.0.0", "ValueError: bad input", final=True, claim=1)
    store.reopen_step(run.run_id, "0.0.0", reason="dead letter 6f1e (retries exhausted)")
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS, worker="host:3/4")
    store.complete_step(run.run_id, "0.0.0", [Frame("p", "0.0", 0, 1), Frame("c", "0", 0, 2)], "1", claim=2)

    status = store.get_run(run.run_id)

    assert status is not None
    history = status.steps[0].history
    assert [(h.kind, h.attempt, h.outcome, h.error, h.worker) for h in history] == [
        ("attempt", 1, "failed", "ValueError: bad input", "host:1/2"),
        ("replay", None, None, "dead letter 6f1e (retries exhausted)", None),
        ("attempt", 2, "succeeded", None, "host:3/4"),
    ]
    assert history[0].at_ms <= (history[0].ended_at_ms or 0) <= history[1].at_ms <= history[2].at_ms
    assert history[2].ended_at_ms is not None
