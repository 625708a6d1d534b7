"""RunPlans, on every backend: a run's chain continuations, its first steps with what they receive, and
the results its steps recorded; and a step its run has not released yet, which neither claims, ends nor
reopens."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

import orjson
import pytest

from pipelines.store import NewRun, RunStore
from pipelines.wire.steps import ROOT, AddressNotInPlan, Frame, frames_json

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


#: chain(parallel(member, chain(first, second)), callback): each step's ancestors, nearest first.
CHORD_OF_A_CHAIN = {
    "0.0.0": (Frame("p", "0.0", 0, 2), Frame("c", "0", 0, 2)),
    "0.0.1.0": (Frame("c", "0.0.1", 0, 2), Frame("p", "0.0", 1, 2), Frame("c", "0", 0, 2)),
    "0.0.1.1": (Frame("c", "0.0.1", 1, 2), Frame("p", "0.0", 1, 2), Frame("c", "0", 0, 2)),
    "0.1": (Frame("c", "0", 1, 2),),
}


def test_a_step_is_claimed_ended_or_reopened_only_once_its_run_released_it(store: RunStore) -> None:
    run = NewRun(
        run_id=uuid.uuid4().hex,
        pipeline="chord-of-a-chain",
        steps=[(node, "add") for node in CHORD_OF_A_CHAIN],
        starts={"0.0.1.1": '[{"node": "0.0.1.1"}]', "0.1": '[{"node": "0.1"}]'},
        entries={"0.0.1.1": ["0.0.1.1"], "0.1": ["0.1"]},
        frames={node: frames_json(up) for node, up in CHORD_OF_A_CHAIN.items()},
    )
    store.create_run(run)

    def claim(node: str) -> str:
        return store.claim_step(
            run.run_id, node, attempt=1, lease_ms=LEASE_MS, actor="add", up=CHORD_OF_A_CHAIN[node]
        ).kind

    def refused(node: str) -> bool:
        with pytest.raises(AddressNotInPlan, match="not due: its run has not released"):
            claim(node)
        with pytest.raises(AddressNotInPlan, match="not due: its run has not released"):
            store.complete_step(run.run_id, node, CHORD_OF_A_CHAIN[node], "100")
        return store.reopen_step(run.run_id, node) == ("not due", node)

    def run_it(node: str, value: str) -> str:
        """Claim the step and end it: what follows (the continuation its end released, or its kind)."""
        assert claim(node) == "run"
        advance = store.complete_step(run.run_id, node, CHORD_OF_A_CHAIN[node], value)
        return advance.node or advance.kind

    assert refused("0.0.1.1")
    assert refused("0.1")
    assert run_it("0.0.0", "1") == "waiting"
    assert refused("0.1")  # its barrier waits for the other member
    assert run_it("0.0.1.0", "2") == "0.0.1.1"
    assert refused("0.1")
    assert run_it("0.0.1.1", "3") == "0.1"
    assert run_it("0.1", "4") == "done"
    status = store.get_run(run.run_id)
    assert status is not None
    assert (status.state, status.result) == ("succeeded", 4)
    assert [(step.node, step.state, step.attempts) for step in status.steps] == [
        (node, "succeeded", 1) for node in CHORD_OF_A_CHAIN
    ]
