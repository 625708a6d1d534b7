"""RunViews, on every backend: runs read, awaited, cancelled, and found by key or by age."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace

from pipelines.store import NewRun, RunStore

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000


def test_a_run_reads_back_as_it_was_started_with_its_steps_in_plan_order(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(11, correlation_id="corr-1", trace_id="ab" * 16)
    store.create_run(run)

    status = store.get_run(run.run_id)

    assert status is not None
    assert (status.run_id, status.pipeline, status.state) == (run.run_id, "chord", "pending")
    assert (status.correlation_id, status.trace_id) == ("corr-1", "ab" * 16)
    assert status.created_at_ms > 0
    assert (status.started_at_ms, status.finished_at_ms, status.result_json, status.error) == (None, None, None, None)
    assert [s.node for s in status.steps] == [f"0.0.{i}" for i in range(11)] + ["0.1"]
    assert {(s.actor, s.state, s.attempts) for s in status.steps[:-1]} == {("member", "pending", 0)}
    assert store.get_run("no-such-run") is None


def test_run_state_reads_only_the_state(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(2)
    store.create_run(run)
    assert store.run_state(run.run_id) == "pending"

    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
    assert store.run_state(run.run_id) == "running"
    store.cancel_run(run.run_id)
    assert store.run_state(run.run_id) == "cancelled"
    assert store.run_state("no-such-run") is None


def test_cancel_ends_a_running_run_once(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(1)
    store.create_run(run)

    assert store.cancel_run(run.run_id) is True
    assert store.cancel_run(run.run_id) is False
    assert store.cancel_run("no-such-run") is False
    assert store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS).kind == "stopped"
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.error) == ("cancelled", None)
    assert status.finished_at_ms is not None


def test_wait_returns_when_the_run_ends_in_another_thread_and_times_out_otherwise(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(1)
    store.create_run(run)
    changes: list[str] = []

    still_running = store.wait_run(run.run_id, 0.05)
    assert still_running is not None
    assert not still_running.is_final

    timer = threading.Timer(0.2, store.cancel_run, args=(run.run_id,))
    timer.start()
    ended = store.wait_run(run.run_id, 30, on_change=lambda s: changes.append(s.state))
    timer.join()

    assert ended is not None
    assert ended.state == "cancelled"
    assert changes
    assert set(changes) <= {"pending"}
    assert store.wait_run("no-such-run", 30) is None


def test_run_for_key_finds_the_run_a_key_started_and_nothing_for_an_unknown_key(
    store: RunStore, new_chord: NewChord
) -> None:
    run = new_chord(1, key="order-7")
    store.create_run(run)

    assert store.run_for_key("order-7") == run.run_id
    assert store.run_for_key("order-8") is None


def test_runs_are_found_by_the_start_of_their_id_with_glob_characters_taken_as_they_are(
    store: RunStore, new_chord: NewChord
) -> None:
    runs = [replace(new_chord(1), run_id=run_id) for run_id in ("ab12", "ab34", "a*c", "a?c")]
    for run in runs:
        store.create_run(run)

    assert sorted(store.run_ids_starting("ab", limit=10)) == ["ab12", "ab34"]
    assert store.run_ids_starting("ab3", limit=10) == ["ab34"]
    assert store.run_ids_starting("a*", limit=10) == ["a*c"]
    assert store.run_ids_starting("a?", limit=10) == ["a?c"]
    assert len(store.run_ids_starting("a", limit=2)) == 2
    assert store.run_ids_starting("z", limit=10) == []


def test_recent_runs_lists_the_newest_first_up_to_the_limit(store: RunStore, new_chord: NewChord) -> None:
    assert store.recent_runs(10) == []
    # Ids ascending in creation order, so runs created within one millisecond still sort newest first.
    prefix = uuid.uuid4().hex
    runs = [replace(new_chord(1), run_id=f"{prefix}-{i}") for i in range(3)]
    for run in runs:
        store.create_run(run)

    assert store.recent_runs(10) == [runs[2].run_id, runs[1].run_id, runs[0].run_id]
    assert store.recent_runs(2) == [runs[2].run_id, runs[1].run_id]


def test_a_run_lists_the_runs_that_re_run_it_while_it_is_retained(store: RunStore, new_chord: NewChord) -> None:
    original, first, second = new_chord(2), new_chord(2), new_chord(2)
    for run in (original, first, second):
        store.create_run(run)

    store.link_rerun(original.run_id, first.run_id)
    store.link_rerun(original.run_id, second.run_id)
    store.link_rerun("no-such-run", first.run_id)  # past its retention: nothing to link

    status = store.get_run(original.run_id)
    assert status is not None
    assert status.reruns == (first.run_id, second.run_id)
    assert store.get_run("no-such-run") is None
