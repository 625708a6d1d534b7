"""What the console shows, as plain typed records: runs, steps, dead letters, queues and workers.

:mod:`pipelines.console.data` and :mod:`pipelines.console.overview` make them from the app; the pages
print them and the API sends them as JSON (times in epoch milliseconds, durations in seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipelines.console.charts import Chart
from pipelines.console.shape import ShapeNode
from pipelines.flow.first_steps import FirstStep, Sealed
from pipelines.store.base import WorkerBeat
from pipelines.store.counts import ActorCounts
from pipelines.store.step_history import AttemptLog, HistoryEntry


@dataclass(frozen=True)
class RunFilter:
    """Which runs to list; None matches anything."""

    state: str | None = None
    pipeline: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    key: str | None = None


@dataclass(frozen=True)
class RunRow:
    """A run as the runs list shows it."""

    run_id: str
    pipeline: str
    state: str
    created_at_ms: int
    finished_at_ms: int | None
    duration_s: float | None
    steps_done: int
    steps_total: int
    error: str | None
    failed_step: str | None


@dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first; ``next_cursor`` continues with older ones."""

    runs: tuple[RunRow, ...]
    next_cursor: str | None


@dataclass(frozen=True)
class StepView:
    """One step of a run."""

    node: str
    actor: str
    state: str
    attempts: int
    started_at_ms: int | None
    finished_at_ms: int | None
    duration_s: float | None
    progress: float | None
    progress_text: str | None
    error: str | None
    worker: str | None
    """Who ran it, once the store records it (None until then)."""
    history: tuple[HistoryEntry, ...] = ()
    """Its attempts and replays, oldest first (errors and reasons masked)."""


@dataclass(frozen=True)
class RunView:
    """One run: its record, its steps, their counts by state, and its shape."""

    run_id: str
    pipeline: str
    state: str
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    duration_s: float | None
    error: str | None
    failed_step: str | None
    correlation_id: str | None
    trace_id: str | None
    trace_url: str | None
    trace_sampled: bool
    """False when sampling left the run out: its trace holds its failed or slow steps only, if any."""
    result_json: str | None
    steps: tuple[StepView, ...]
    counts: dict[str, int]
    shape: ShapeNode[StepView]
    input: Any = None
    """The run's arguments as started, ``[args, kwargs]`` (a sealed value when its first steps encrypt;
    None when not kept)."""
    first_steps: tuple[FirstStep, ...] | Sealed | None = None
    """The steps the run started with and the arguments each was given (``"sealed"`` when one of their
    actors encrypts; None when not kept): what a run built on the spot was started with."""
    registered: bool = False
    """Whether a registered pipeline's name started the run (only such a run can be re-run)."""
    rerun_of: str | None = None
    """The run this one re-runs."""
    reruns: tuple[str, ...] = ()
    """The runs that re-run this one, oldest first."""


@dataclass(frozen=True)
class LetterView:
    """A dead letter: where it lies, why it died, the run and step it belongs to, and its message."""

    id: str
    queue: str
    source_queue: str
    actor: str | None
    reason: str
    error_type: str | None
    error: str | None
    traceback: str | None
    attempts: int | None
    run_id: str | None
    step: str | None
    correlation_id: str | None
    at: str
    age_s: float | None
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    sealed: bool
    """The actor seals its whole argument list: the arguments travel sealed (and stay so here)."""
    body: str | None
    """The raw body of a message that could not be decoded (it cannot be replayed)."""


@dataclass(frozen=True)
class StepDetail:
    """What a step was given and gave back, and its dead letters (with the traceback)."""

    step: StepView
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    arguments_from: str | None
    """Where the arguments come from: "plan" (bound when the pipeline was built, the previous result
    added when it runs), "dead letter" (as it last ran), "sealed" (its dead letter's, sealed: none
    shown), or None when the store keeps none (first steps)."""
    result_json: str | None
    dead_letters: tuple[LetterView, ...]
    logs: tuple[AttemptLog, ...] = ()
    """What its attempts logged, oldest attempt first (the newest records the store keeps, masked)."""


@dataclass(frozen=True)
class QueueView:
    actor: str
    queue: str
    profile: str
    depth: int | None
    dead: int | None
    consumers: int | None
    """Consumers reading the queue now, in every worker process (None when not known)."""
    unacked: int | None
    """Deliveries the live workers hold unacknowledged, as of their last heartbeats (None when not known)."""
    processing: float | None
    """Messages the workers are processing now, not yet acknowledged (from their metrics)."""
    rate_per_s: float | None
    failed_per_s: float | None
    oldest_age_s: float | None
    last_hour: ActorCounts
    """Its actor's messages in the last hour, from the counts the workers add to the run store."""


@dataclass(frozen=True)
class WorkerView:
    """A worker process: its latest heartbeat in the run store, and what the other heartbeats add."""

    beat: WorkerBeat
    processes: int
    """The live processes of its ``dramatiq`` command (this one included)."""
    seen_s_ago: float
    alive: bool


@dataclass(frozen=True)
class Overview:
    """Queues and workers; ``notes`` says what could not be read and why."""

    queues: tuple[QueueView, ...]
    workers: tuple[WorkerView, ...]
    notes: tuple[str, ...]
    sampled_at: float
    charts: tuple[Chart, ...]
    """Throughput, failures and processing time a minute over the last hour, every actor added up."""
