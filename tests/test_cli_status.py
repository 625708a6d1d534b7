"""How `pipelines status` reads a run: its shape as a tree, folded when big, its trace id and outcome."""

from __future__ import annotations

import json
import re

from pipelines.cli.output import dumps
from pipelines.cli.status import format_status, status_json
from pipelines.flow.first_steps import first_steps
from pipelines.store.base import RunStatus, StepStatus

CHORD_STARTS = {"0.1": '[{"node": "0.1"}]'}


def _chord(members: int, *, failed: int | None = None) -> RunStatus:
    steps = [
        StepStatus(
            node=f"0.0.{i}",
            actor="member",
            state="failed" if i == failed else "succeeded",
            attempts=3 if i == failed else 1,
            started_at_ms=1_000,
            finished_at_ms=1_250,
            error="ValueError: bad row" if i == failed else None,
            worker=f"web-{i % 2}:42{i}/Thread-{i}",
        )
        for i in range(members)
    ]
    steps.append(StepStatus(node="0.1", actor="callback", state="skipped" if failed is not None else "succeeded"))
    return RunStatus(
        run_id="r" * 32,
        pipeline="report",
        state="failed" if failed is not None else "succeeded",
        created_at_ms=1_000,
        finished_at_ms=2_000,
        result_json=None if failed is not None else '{"rows": 20}',
        error="ValueError: bad row" if failed is not None else None,
        failed_step=f"0.0.{failed}" if failed is not None else None,
        trace_id="ab" * 16,
        steps=tuple(steps),
    )


def test_a_chord_is_drawn_as_a_tree_with_its_members_folded_and_the_failed_one_in_view() -> None:
    text = format_status(_chord(20, failed=17), CHORD_STARTS)

    lines = text.splitlines()
    assert lines[0] == f"run {'r' * 32}  report  failed  1.000 s"
    assert lines[1].endswith(f"trace {'ab' * 16}")
    assert "chord  19 succeeded, 1 failed, 1 skipped" in text
    assert "group (20)" in text
    assert re.search(
        r"0\.0\.17 member  failed  0\.250 s  attempts=3  on web-1:4217/Thread-17  ValueError: bad row", text
    )
    assert re.search(r"\.\.\. 12 more \(12 succeeded\)", text)
    assert re.search(r"0\.1 callback  skipped", text)
    assert lines[-1] == "error at step 0.0.17: ValueError: bad row"


def test_a_run_that_never_started_says_why_without_a_step() -> None:
    never = RunStatus(
        run_id="n" * 32,
        pipeline="one",
        state="failed",
        created_at_ms=1_000,
        finished_at_ms=1_100,
        error="The run could not be started: interrupted",
        steps=(StepStatus(node="0", actor="one", state="skipped"),),
    )

    text = format_status(never)

    assert "0 one  skipped" in text
    assert " on " not in text  # no worker ever claimed the step
    assert text.splitlines()[-1] == "error: The run could not be started: interrupted"
    assert "None" not in text


def test_the_json_status_carries_the_result_as_a_value_and_the_shape() -> None:
    data = json.loads(dumps(status_json(_chord(3), CHORD_STARTS)))

    assert data["result"] == {"rows": 20}
    assert "result_json" not in data
    assert data["trace_id"] == "ab" * 16
    assert data["shape"]["kind"] == "chord"
    assert [child["kind"] for child in data["shape"]["children"]] == ["group", "step"]
    assert data["shape"]["children"][0]["size"] == 3
    assert [step["worker"] for step in data["steps"]] == [
        "web-0:420/Thread-0",
        "web-1:421/Thread-1",
        "web-0:422/Thread-2",
        None,
    ]


def test_a_run_built_on_the_spot_lists_its_first_steps_arguments_a_few_at_most_or_says_they_are_sealed() -> None:
    leaves = [  # as the store keeps them (Leaf.to_json)
        {"node": f"0.0.{i}", "actor": "member", "queue": "q", "args": [i], "kwargs": {}, "options": {}, "up": []}
        for i in range(10)
    ]
    kept = (json.dumps(leaves), '[[], {"day": "2026-01-01"}]')

    text = format_status(_chord(10), CHORD_STARTS, first_steps(kept))
    sealed = format_status(_chord(10), CHORD_STARTS, first_steps(('{"$sealed": "x"}', '{"$sealed": "y"}')))

    assert 'first step 0.0.0 member(0, day="2026-01-01")' in text
    assert 'first step 0.0.7 member(7, day="2026-01-01")' in text
    assert "... 2 more first steps" in text
    assert "0.0.8 member(" not in text
    assert "first steps sealed (an actor of this run encrypts its arguments)" in sealed
