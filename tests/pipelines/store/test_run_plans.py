"""RunPlans, on every backend: a run's chain continuations, its first steps with what they receive, and
the results its steps recorded."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

import orjson

from pipelines.store import NewRun, RunStore
from pipelines.wire.steps import ROOT, Frame

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000


def test_continuations_read_back_as_the_run_was_started(store: RunStore, new_chord: NewChord) -> None:
    run = new_chord(3)
    store.create_run(run)

    assert store.run_continuations(run.run_id) == {"0.1": '[{"node": "0.1"}]'}
    assert store.run_continuations("no-such-run") == {}


def test_first_steps_read_back_with_what_they_receive_as_the_run_was_started(
    store: RunStore, new_chord: NewChord
) -> None:
    chord = new_chord(2)
    leaves = '[{"node": "0.0.0", "args": [41]}, {"node": "0.0.1", "args": [42]}]'
    run = dataclasses.replace(
        chord,
        starts={**chord.starts, ROOT: leaves},
        entries={**chord.entries, ROOT: ["0.0.0", "0.0.1"]},
        first_input='[[],{"currency":"EUR"}]',
    )
    store.create_run(run)
    without = new_chord(1)  # a run whose first steps were not kept
    store.create_run(without)

    assert store.run_first_steps(run.run_id) == (leaves, '[[],{"currency":"EUR"}]')
    assert store.run_continuations(run.run_id) == {"0.1": '[{"node": "0.1"}]'}  # the first steps are none
    assert store.run_first_steps(without.run_id) is None
    assert store.run_first_steps("no-such-run") is None


def test_a_chain_step_result_is_read_from_the_chain_and_a_member_result_from_its_barrier(store: RunStore) -> None:
    run = NewRun(
        run_id=uuid.uuid4().hex,
        pipeline="chain-then-chord",
        steps=[("0.0", "first"), ("0.1.0", "member"), ("0.1.1", "member"), ("0.2", "callback")],
        starts={"0.1": "[]", "0.2": "[]"},
        entries={"0.1": ["0.1.0", "0.1.1"], "0.2": ["0.2"]},
    )
    store.create_run(run)
    store.claim_step(run.run_id, "0.0", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(run.run_id, "0.0", [Frame("c", "0", 0, 3)], orjson.dumps({"first": 1}).decode())
    store.claim_step(run.run_id, "0.1.1", attempt=1, lease_ms=LEASE_MS)
    store.complete_step(run.run_id, "0.1.1", [Frame("p", "0.1", 1, 2), Frame("c", "0", 1, 3)], '"second member"')

    assert store.step_result(run.run_id, "0.0") == '{"first":1}'
    assert store.step_result(run.run_id, "0.1.1", member_of=("0.1", 1)) == '"second member"'
    assert store.step_result(run.run_id, "0.1.0", member_of=("0.1", 0)) is None
    assert store.step_result(run.run_id, "0.2") is None
    assert store.step_result("no-such-run", "0.0") is None
