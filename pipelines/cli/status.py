"""A run read as a whole: its pipeline's shape as a tree (chain, fan-out, group, chord, members folded
when many), each step with its state, attempts, duration, progress, worker and error (and its history,
when it ran more than once or was replayed), and the trace id.

The shape comes from :func:`pipelines.console.shape.build_shape`, the one the web console draws.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import orjson
from rich.text import Text
from rich.tree import Tree

from pipelines.cli.output import seconds, state_text
from pipelines.cli.step_history import history_line, shows_history
from pipelines.config.masking import mask_text
from pipelines.console.shape import ShapeNode, build_shape
from pipelines.flow.first_steps import FirstStep, Sealed
from pipelines.store.base import RunStatus, StepStatus

#: A parallel node with more members than this shows that many (failed, retrying and running first).
FOLD_AT = 8
#: The most of a run's input its status prints (``--json`` has all of it).
INPUT_CHARS = 200
#: What a run whose input is sealed shows of it.
SEALED = "sealed (an actor of this run encrypts its arguments)"
#: What a run that sampling left out has of a trace.
NOT_SAMPLED = "not sampled: only its failed or slow steps are traced"


def shape_of(status: RunStatus, continuations: dict[str, str]) -> ShapeNode[StepStatus]:
    """The run's tree, its big parallel nodes folded."""
    return build_shape(
        [(step.node, step.actor, step) for step in status.steps],
        continuations,
        fold_at=FOLD_AT,
        state_of={step.node: step.state for step in status.steps},
    )


def _took(step: StepStatus, now_ms: int) -> float | None:
    if not step.started_at_ms:
        return None
    return ((step.finished_at_ms or now_ms) - step.started_at_ms) / 1000


def _step_line(step: StepStatus, now_ms: int) -> Text:
    line = Text(f"{step.node} ", style="dim")
    line.append(f"{step.actor}  ")
    line.append_text(state_text(step.state))
    took = seconds(_took(step, now_ms))
    if took:
        line.append(f"  {took}")
    if step.attempts > 1:
        line.append(f"  attempts={step.attempts}", style="yellow")
    if step.progress is not None and step.state in ("running", "retrying"):
        line.append(f"  {step.progress:.0%} {step.progress_text or ''}".rstrip())
    if step.worker:
        line.append(f"  on {step.worker}", style="dim")
    if step.error:
        line.append(f"  {mask_text(step.error)}", style="red")
    return line


def _node_label(node: ShapeNode[StepStatus]) -> Text:
    counts: dict[str, int] = {}
    for step in node.steps:
        counts[step.state] = counts.get(step.state, 0) + 1
    label = Text(node.kind, style="bold")
    label.append(f" ({node.size})" if node.kind in ("fan-out", "group") else "")
    label.append("  " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    return label


def _add_step(tree: Tree, step: StepStatus, now_ms: int) -> None:
    """The step's line, its history under it when it ran more than once or was replayed."""
    branch = tree.add(_step_line(step, now_ms))
    if shows_history(step):
        for entry in step.history:
            branch.add(history_line(step, entry))


def _grow(tree: Tree, node: ShapeNode[StepStatus], now_ms: int) -> None:
    for child in node.children:
        if child.step is not None:
            _add_step(tree, child.step, now_ms)
        else:
            _grow(tree.add(_node_label(child)), child, now_ms)
    if node.folded is not None:
        by_state = ", ".join(f"{n} {state}" for state, n in node.folded.by_state.items())
        tree.add(Text(f"... {node.folded.count} more ({by_state})", style="dim"))


#: The first steps a run's status lists with their arguments, at most (``--json`` has them all).
FIRST_STEPS_SHOWN = 8

FirstSteps = tuple[FirstStep, ...] | Sealed | None


def status_tree(status: RunStatus, continuations: dict[str, str], first: FirstSteps = None) -> Tree:
    """The run as a tree, headed by its id, pipeline, state, duration, trace id and input: for a run built
    on the spot, the arguments its first steps were started with (``first``, as
    :func:`~pipelines.flow.first_steps.first_steps` reads them)."""
    header = Text(f"run {status.run_id}  {status.pipeline}  ")
    header.append_text(state_text(status.state))
    header.append(f"  {seconds(status.duration_s)}")
    if status.trace_id:
        header.append(f"\ntrace {status.trace_id}", style="dim")
        if not status.trace_sampled:
            header.append(f" ({NOT_SAMPLED})", style="dim")
    if not status.registered and first:  # given nothing as a whole: what its first steps were
        header.append("".join(f"\n{line}" for line in first_steps_lines(first)))
    elif status.input_json is not None:
        header.append(f"\ninput {input_text(status.input_json)}")
    if status.rerun_of:
        header.append(f"\nre-run of {status.rerun_of}", style="dim")
    if status.reruns:
        header.append(f"\nre-run as {', '.join(status.reruns)}", style="dim")
    tree = Tree(header, guide_style="dim")
    now_ms = int(time.time() * 1000)
    root = shape_of(status, continuations)
    if root.step is not None:
        _add_step(tree, root.step, now_ms)
    else:
        _grow(tree.add(_node_label(root)), root, now_ms)
    return tree


def input_text(input_json: str) -> str:
    """A run's input on one line: ``args`` and ``kwargs`` as given, or that it is sealed."""
    given = orjson.loads(input_json)
    if isinstance(given, dict):  # a sealed value: only a worker with the keys opens it
        return SEALED
    return _shortened(" ".join(_words(*given))) or "(none)"


def _words(args: list[Any], kwargs: dict[str, Any]) -> list[str]:
    return [*(orjson.dumps(a).decode() for a in args), *(f"{k}={orjson.dumps(v).decode()}" for k, v in kwargs.items())]


def _shortened(text: str) -> str:
    text = mask_text(text)
    return text if len(text) <= INPUT_CHARS else text[: INPUT_CHARS - 3] + "..."


def first_steps_lines(first: tuple[FirstStep, ...] | Sealed) -> list[str]:
    """A line per first step, ``first step 0.0 charge(41, total=9.5)``, or one that they are sealed."""
    if isinstance(first, str):
        return [f"first steps {SEALED}"]
    lines = [
        f"first step {step.node} {step.actor}({_shortened(', '.join(_words(step.args, step.kwargs)))})"
        for step in first
    ]
    if len(lines) > FIRST_STEPS_SHOWN:
        lines[FIRST_STEPS_SHOWN:] = [f"... {len(lines) - FIRST_STEPS_SHOWN} more first steps"]
    return lines


def outcome_line(status: RunStatus) -> Text | None:
    """The result of a run that succeeded, or the error of one that failed (None otherwise)."""
    if status.state == "succeeded":
        return Text(f"result: {mask_text(str(status.result_json))}")
    if status.error:
        where = f" at step {status.failed_step}" if status.failed_step else ""
        return Text(f"error{where}: {mask_text(status.error)}", style="red")
    return None


def format_status(status: RunStatus, continuations: dict[str, str] | None = None, first: FirstSteps = None) -> str:
    """The run as plain text (the tree and its outcome), for callers that print it themselves.

    ``continuations`` (``RunPlans.run_continuations``) tell a chain from a fan-out; without them, a
    node with several children is drawn as parallel.
    """
    from rich.console import Console

    console = Console(width=10_000, force_terminal=False, no_color=True, highlight=False)
    with console.capture() as captured:
        console.print(status_tree(status, continuations or {}, first))
        outcome = outcome_line(status)
        if outcome is not None:
            console.print(outcome)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def _shape_json(node: ShapeNode[StepStatus]) -> dict[str, Any]:
    if node.step is not None:
        return {"node": node.node, "kind": "step", "actor": node.step.actor}
    data: dict[str, Any] = {"node": node.node, "kind": node.kind, "size": node.size}
    data["children"] = [_shape_json(child) for child in node.children]
    if node.folded is not None:
        data["folded"] = {"count": node.folded.count, "by_state": dict(node.folded.by_state)}
    return data


def status_json(status: RunStatus, continuations: dict[str, str], first: FirstSteps = None) -> dict[str, Any]:
    """The run as JSON: its result as a value, its input, its first steps with their arguments (``"sealed"``
    when an actor of theirs encrypts), its steps, its duration and its shape."""
    data = {key: value for key, value in asdict(status).items() if key not in ("result_json", "input_json")}
    data["result"] = status.result
    data["input"] = orjson.loads(status.input_json) if status.input_json is not None else None
    data["first_steps"] = [asdict(step) for step in first] if isinstance(first, tuple) else first
    data["duration_s"] = status.duration_s
    data["shape"] = _shape_json(shape_of(status, continuations))
    return data
