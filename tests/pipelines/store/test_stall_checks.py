"""StallChecks on every backend: running runs kept alive, stalled ones re-driven from where their steps
started, and failed with the reason when re-driving does not help.

Time is moved by writing the run's last touch, its place in the index and the sweep's clock into the
past (a threshold is a point in time: no waiting for the clock).
"""

from __future__ import annotations

import time
import uuid

import orjson

from pipelines.store import NewRun, RunStore, StallCheck, StalledGroup
from pipelines.wire.steps import Frame
from tests.support.store_time import held_as_going, stop_sweeping_since_the_epoch, untouch

STALLED_AFTER_MS = 60_000
LEASE_MS = 60_000


def leaf(node: str, actor: str, up: list[list[object]]) -> dict[str, object]:
    return {"node": node, "actor": actor, "queue": "default", "args": [], "kwargs": {}, "options": {}, "up": up}


FIRST = orjson.dumps([leaf("0.0", "book", [["c", "0", 0, 2]])]).decode()
FIRST_UP = (Frame("c", "0", 0, 2),)
THEN = orjson.dumps([leaf("0.1", "ship", [["c", "0", 1, 2]])]).decode()


def new_chain(*, first_input: str | None = "[[7],{}]") -> NewRun:
    """A run of chain(book, ship) as the runtime records it: where its steps start, and its first input."""
    return NewRun(
        run_id=uuid.uuid4().hex,
        pipeline="booking",
        steps=[("0.0", "book"), ("0.1", "ship")],
        starts={"0": FIRST, "0.1": THEN},
        entries={"0": ["0.0"], "0.1": ["0.1"]},
        correlation_id="corr-1",
        first_input=first_input,
    )


def sweep(store: RunStore, *, redrives: int = 3) -> dict[str, StallCheck]:
    checks = store.sweep_stalled(stalled_after_ms=STALLED_AFTER_MS, redrives=redrives, gap_ms=600_000, limit=100)
    return {check.run_id: check for check in checks}


def test_a_run_touched_lately_is_not_looked_at_and_an_untouched_one_is_re_driven_where_its_steps_start(
    store: RunStore,
) -> None:
    run = new_chain()
    store.create_run(run)

    assert sweep(store) == {}  # created just now
    untouch(store, run.run_id)
    check = sweep(store)[run.run_id]

    assert (check.kind, check.redrive, check.pipeline, check.correlation_id) == ("redrive", 1, "booking", "corr-1")
    assert check.groups == (StalledGroup("0", FIRST, "[[7],{}]", ("0.0",)),)  # not 0.1: it never started
    assert sweep(store) == {}  # the re-drive counts as a touch


def test_a_step_holding_a_live_lease_keeps_its_run_alive_until_the_lease_lapses(store: RunStore) -> None:
    run = new_chain()
    store.create_run(run)
    store.claim_step(run.run_id, "0.0", attempt=1, lease_ms=LEASE_MS)
    untouch(store, run.run_id)

    check = sweep(store)[run.run_id]

    assert check.kind == "alive"
    assert check.touched_ms > time.time() * 1000 + LEASE_MS / 2  # the lease's end: looked at again after it
    assert sweep(store) == {}


def test_a_continuation_handed_out_is_re_driven_with_what_it_received(store: RunStore) -> None:
    run = new_chain()
    store.create_run(run)
    store.claim_step(run.run_id, "0.0", attempt=1, lease_ms=1)
    assert store.complete_step(run.run_id, "0.0", FIRST_UP, "5").kind == "start"  # a chain of two, as its frames say
    untouch(store, run.run_id)

    check = sweep(store)[run.run_id]

    assert check.groups == (StalledGroup("0.1", THEN, "[[5],{}]", ("0.1",)),)


def test_re_drives_without_progress_wait_longer_each_time_and_then_fail_the_run_with_the_reason(
    store: RunStore,
) -> None:
    run = new_chain()
    store.create_run(run)
    untouch(store, run.run_id)

    first = sweep(store, redrives=2)[run.run_id]
    untouch(store, run.run_id)
    second = sweep(store, redrives=2)[run.run_id]
    untouch(store, run.run_id)
    last = sweep(store, redrives=2)[run.run_id]

    assert (first.kind, first.redrive, second.kind, second.redrive) == ("redrive", 1, "redrive", 2)
    assert second.touched_ms - first.touched_ms >= STALLED_AFTER_MS  # the second waits a threshold longer
    assert (last.kind, last.step) == ("failed", "0.0")
    assert str(last.error).startswith("stalled: nothing advanced it for")
    assert str(last.error).endswith(", nor after 2 re-drives")
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.failed_step, status.error) == ("failed", "0.0", last.error)
    assert not held_as_going(store, run.run_id)  # out of the index


def test_a_step_that_finishes_starts_the_count_of_re_drives_again(store: RunStore) -> None:
    run = new_chain()
    store.create_run(run)
    untouch(store, run.run_id)
    assert sweep(store, redrives=1)[run.run_id].redrive == 1
    store.claim_step(run.run_id, "0.0", attempt=1, lease_ms=1)
    store.complete_step(run.run_id, "0.0", FIRST_UP, "5")
    untouch(store, run.run_id)

    check = sweep(store, redrives=1)[run.run_id]

    assert (check.kind, check.redrive) == ("redrive", 1)


def test_a_run_with_nothing_to_publish_again_is_failed_at_once(store: RunStore) -> None:
    run = new_chain(first_input=None)  # kept by no store before the sweep: its first steps cannot be rebuilt
    store.create_run(run)
    untouch(store, run.run_id)

    check = sweep(store)[run.run_id]

    assert check.kind == "failed"
    assert str(check.error).endswith(", and none of its steps can be published again")


def test_a_run_that_ended_leaves_the_index_and_keep_alives_touch_only_runs_still_going(store: RunStore) -> None:
    ended, going = new_chain(), new_chain()
    store.create_runs([ended, going])
    store.cancel_run(ended.run_id)
    untouch(store, ended.run_id)
    untouch(store, going.run_id)

    assert store.keep_alive([ended.run_id, going.run_id, uuid.uuid4().hex]) == 1
    checks = sweep(store)

    assert {run_id: check.kind for run_id, check in checks.items()} == {ended.run_id: "gone", going.run_id: "alive"}
    assert not held_as_going(store, ended.run_id)
    assert sweep(store) == {}  # the one going moved to its last touch


def test_a_gap_in_sweeping_starts_the_stall_clock_again(store: RunStore) -> None:
    run = new_chain()
    store.create_run(run)
    untouch(store, run.run_id)
    stop_sweeping_since_the_epoch(store)

    check = sweep(store)[run.run_id]

    assert check.kind == "alive"  # nothing could advance it while nothing swept: the clock starts now
