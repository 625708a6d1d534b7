"""What the run store reads and writes: new runs, run and step states, claims, advances, lease checks.

The operations on them are the role protocols of ``pipelines.store.roles``.

Step states: ``pending`` → ``running`` → ``succeeded`` | ``retrying`` (→ ``running``) | ``failed``;
``skipped`` when the run failed or was cancelled before the step ran (or while it was waiting to run
again, or stopped it at a cancellation check). Run states: ``pending`` → ``running`` → ``succeeded`` |
``failed`` | ``cancelled``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from pipelines.store.step_history import HistoryEntry

RunState = Literal["pending", "running", "succeeded", "failed", "cancelled"]
StepState = Literal["pending", "running", "retrying", "succeeded", "failed", "skipped"]
FINAL_RUN_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


def shown_step_state(run_state: str, step_state: StepState) -> StepState:
    """A step of a failed or cancelled run that is still to run (or run again) never will: skipped.

    Derived when the run is read, because most such steps never get a message that could record it
    (the steps after a failed chain step are never published).
    """
    if step_state in ("pending", "retrying") and run_state in ("failed", "cancelled"):
        return "skipped"
    return step_state


def _duration_s(created_at_ms: int, finished_at_ms: int | None) -> float:
    end = finished_at_ms or int(time.time() * 1000)
    return (end - created_at_ms) / 1000


@dataclass(frozen=True)
class NewRun:
    """What starting a run writes, in one atomic operation."""

    run_id: str
    pipeline: str
    steps: Sequence[tuple[str, str]]
    """(step id, actor name) for every step, in plan order."""
    starts: Mapping[str, str]
    """Where steps start: step id → JSON list of the leaves that start there (each chain continuation,
    and the run's first steps under the root's id, ``plan.ROOT``)."""
    entries: Mapping[str, Sequence[str]]
    """Where steps start: step id → ids of those leaves."""
    frames: Mapping[str, str] = field(default_factory=dict)
    """Each step's ancestors (step id → ``frames_json``): the plan's truth a
    step message's address must match to run or to advance the run."""
    idempotency_key: str | None = None
    correlation_id: str | None = None
    deadline_s: float | None = None
    """Seconds from creation after which no further step starts and the run fails."""
    trace_id: str | None = None
    """The run's trace (hex), to find it in Jaeger."""
    trace_sampled: bool = True
    """Whether sampling keeps the run's whole trace; when not, its trace holds its failed or slow steps only."""
    first_input: str | None = None
    """What the first steps receive after their own bound arguments: JSON ``[args, kwargs]`` (sealed
    when one of their actors encrypts), kept so that the stall sweep can publish them again."""
    delay_ms: int = 0
    """How long after the run is created its first steps are due (a start delay), in ms."""
    input: str | None = None
    """The run's input: the arguments it was started with, JSON ``[args, kwargs]``, sealed for the run
    when one of the first steps' actors encrypts (a registered factory's own arguments: when any step's
    actor does)."""
    registered: bool = False
    """Whether the run was started by a registered pipeline's name (so it can be re-run by that name)."""
    rerun_of: str | None = None
    """The run this one re-runs, if it is a re-run."""


@dataclass(frozen=True)
class StepStatus:
    """One step of a run: its id (path in the pipeline), actor, state, attempts, timings and worker."""

    node: str
    actor: str
    state: StepState
    attempts: int = 0
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    error: str | None = None
    progress: float | None = None
    """What the step last reported with ``report_progress`` (0..1), and its text."""
    progress_text: str | None = None
    worker: str | None = None
    """The worker whose claim started the latest attempt (``host:pid/thread``); None before one ran."""
    history: tuple[HistoryEntry, ...] = ()
    """Its attempts and replays, oldest first (the latest ``HISTORY_ENTRIES``)."""


@dataclass(frozen=True)
class RunStatus:
    """A run as the store last saw it; times are epoch milliseconds."""

    run_id: str
    pipeline: str
    state: RunState
    created_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    result_json: str | None = None
    error: str | None = None
    failed_step: str | None = None
    correlation_id: str | None = None
    trace_id: str | None = None
    trace_sampled: bool = True
    """False for a run that sampling left out: its trace holds its failed or slow steps only, if any."""
    steps: tuple[StepStatus, ...] = field(default_factory=tuple)
    input_json: str | None = None
    """The run's input, as ``NewRun.input`` (None for a run kept before inputs were)."""
    registered: bool = False
    """Whether a registered pipeline's name started the run."""
    rerun_of: str | None = None
    """The run this one re-runs."""
    reruns: tuple[str, ...] = ()
    """The runs that re-run this one, oldest first."""

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_RUN_STATES

    @property
    def result(self) -> Any:
        """The run's result (None until it succeeded)."""
        return orjson.loads(self.result_json) if self.result_json is not None else None

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to the end (or to now, while it runs)."""
        return _duration_s(self.created_at_ms, self.finished_at_ms)

    def count(self, state: StepState) -> int:
        """How many steps are in ``state``."""
        return sum(1 for step in self.steps if step.state == state)


#: Heartbeats a worker process may miss before it counts as gone.
BEATS_BEFORE_GONE = 3


@dataclass(frozen=True)
class WorkerBeat:
    """A worker process as its latest heartbeat describes it; times are epoch milliseconds."""

    worker_id: str
    """``host:pid``, as a step's worker (``host:pid/thread``) begins."""
    host: str
    pid: int
    parent_pid: int
    """The process that started it: the processes of one ``dramatiq`` command share it."""
    threads: int
    queues: tuple[str, ...]
    """The Dramatiq queue names it reads."""
    processed: int
    """Messages it processed since it started, and of those, how many failed (retried ones included)."""
    failed: int
    running: tuple[str, ...]
    """What it runs now: ``actor`` for each message, with ``run/step`` for a pipeline step."""
    started_at_ms: int
    beat_at_ms: int
    unacked: dict[str, int] = field(default_factory=dict)
    """Per RabbitMQ queue it consumes, the deliveries it holds unacknowledged (prefetched, running, held)."""

    def alive(self, interval_s: float, now_ms: int) -> bool:
        """Whether it beat within its last ``BEATS_BEFORE_GONE`` intervals of ``interval_s``."""
        return now_ms - self.beat_at_ms <= BEATS_BEFORE_GONE * interval_s * 1000

    def to_json(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> WorkerBeat:
        data = orjson.loads(raw)
        return cls(**{**data, "queues": tuple(data["queues"]), "running": tuple(data["running"])})


def command_processes(beats: Sequence[WorkerBeat]) -> dict[tuple[str, int], int]:
    """How many of ``beats`` each ``dramatiq`` command (host, parent pid) runs: its processes."""
    counts: dict[tuple[str, int], int] = {}
    for beat in beats:
        counts[beat.host, beat.parent_pid] = counts.get((beat.host, beat.parent_pid), 0) + 1
    return counts


@dataclass(frozen=True)
class RunSummary:
    """A run as a list of runs shows it: its record without its steps' details; times are epoch ms."""

    run_id: str
    pipeline: str
    state: RunState
    created_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    error: str | None = None
    failed_step: str | None = None
    idempotency_key: str | None = None
    correlation_id: str | None = None
    trace_id: str | None = None
    steps_done: int = 0
    steps_total: int = 0

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to the end (or to now, while it runs)."""
        return _duration_s(self.created_at_ms, self.finished_at_ms)


@dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first, and the cursor of the next page (None: this was the last)."""

    runs: tuple[RunSummary, ...]
    cursor: str | None = None


@dataclass(frozen=True)
class RunQuery:
    """Which runs to find: all of them, or those in a state, of a pipeline, between two times, or one key's run."""

    state: RunState | None = None
    pipeline: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    key: str | None = None


ClaimKind = Literal["run", "done", "stopped", "busy", "missing"]


@dataclass(frozen=True)
class Claim:
    """Whether a worker may run a step now.

    ``run``: go ahead (``attempt`` counts from 1). ``done``: it already succeeded; re-drive what
    follows it. ``stopped``: the run ended; drop the message. ``busy``: another worker holds it for
    ``wait_ms`` more. ``missing``: no such run or step (past retention, or never started).
    """

    kind: ClaimKind
    attempt: int = 0
    wait_ms: int = 0
    run_state: str | None = None


KeyClaimKind = Literal["run", "done", "busy"]
ReopenKind = Literal["reopened", "done", "stopped", "missing", "not due"]
#: What opening a long-running job's lease found: ``opened`` (run it), ``open`` (another copy runs it,
#: or its watchdog owns it) or ``ended`` (the job ended within the retention period: never run it again).
LeaseOpenKind = Literal["opened", "open", "ended"]


AdvanceKind = Literal["start", "local", "waiting", "done", "duplicate", "stopped", "missing", "lost"]


@dataclass(frozen=True)
class Advance:
    """What follows a finished step.

    ``start``: publish ``leaves_json`` (the steps of ``node``) with ``value_json`` as their input.
    ``local``: as ``start``, with its one step claimed for this worker as ``claim`` (complete-and-claim).
    ``waiting``: a parallel barrier still waits on other members. ``done``: the run succeeded with
    ``value_json``. ``duplicate``/``stopped``/``missing``: nothing to do. ``lost``: the attempt had lost
    its claim (its lease lapsed and the step was claimed again): nothing was recorded.
    """

    kind: AdvanceKind
    node: str | None = None
    value_json: str | None = None
    leaves_json: str | None = None
    member_trace_parents: tuple[str, ...] = ()
    """Trace parents of the members of the barrier this step released (a chord callback links them)."""
    chord_wait_ms: int | None = None
    """How long that barrier waited between its first and its last member; None when no barrier was released."""
    run_created_at_ms: int | None = None
    """On ``done``: when the run was created."""
    claim: int | None = None
    """On ``local``: the claim the step that follows was claimed with, for this worker."""


@dataclass(frozen=True)
class LocalOffer:
    """What a worker offers when it completes a step: to run the step that follows itself, if it is one
    step of one of ``actors``, claimed for it under a lease of ``lease_ms``."""

    actors: str
    """The actors' names, each with a space on either side (``" charge ship "``): one string the
    completion script looks a name up in, made once for many completions."""
    lease_ms: int


@dataclass(frozen=True)
class Renewal:
    """What a worker's renewal of its holds could not renew: ``lost_steps`` were claimed again by a
    worker that found their lease lapsed, ``ended_steps`` are no longer running (done, or their run
    ended), ``lost_keys`` lapsed and were claimed again or recorded done."""

    lost_steps: tuple[tuple[str, str], ...] = ()
    ended_steps: tuple[tuple[str, str], ...] = ()
    lost_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeadlineCheck:
    """A run's deadline, checked: ``failed`` now (naming the ``step`` that was running, if one was),
    ``wait`` ``wait_ms`` more, or ``none`` (no deadline, or the run ended)."""

    kind: Literal["failed", "wait", "none"]
    wait_ms: int = 0
    step: str | None = None


@dataclass(frozen=True)
class LeaseCheck:
    """A watchdog's look at a lease: ``alive`` (for ``wait_ms`` more), ``expired`` (taken over, with the
    job's ``record``), or ``gone`` (the job ended)."""

    kind: Literal["alive", "expired", "gone"]
    wait_ms: int = 0
    record: str | None = None


class RunFeed(Protocol):
    """A subscription to the changes of the runs it follows (one connection, however many runs).

    Not thread-safe: one thread follows, unfollows and reads it.
    """

    def follow(self, run_id: str) -> None:
        """Hear of this run's changes from now on (follow first, then read the run: nothing is missed)."""

    def unfollow(self, run_id: str) -> None:
        """Stop hearing of this run."""

    def next_change(self, timeout_s: float) -> str | None:
        """The id of a followed run that changed, or None after ``timeout_s`` with no change."""

    def close(self) -> None:
        """End the subscription."""


@dataclass(frozen=True)
class SlotTake:
    """A rate limit's answer to a message about to run: run now (``wait_ms`` 0), or wait for ``slot_ms``."""

    wait_ms: int
    """0: the slot is taken and the message runs now; else how long it must wait, in ms."""
    slot_ms: int
    """The store's time of the slot (epoch ms): now, or the later slot reserved for the message."""


@dataclass(frozen=True)
class StalledGroup:
    """Steps of a stalled run that start together, to publish again: where they start (``plan.ROOT`` or a
    chain continuation), the leaves that start there (JSON), what they receive after their own bound
    arguments (JSON ``[args, kwargs]``, maybe sealed) and the ids of those of them that are idle."""

    node: str
    leaves_json: str
    input_json: str
    steps: tuple[str, ...]


@dataclass(frozen=True)
class StallCheck:
    """What the stall sweep found of one running run.

    ``gone``: it ended (or is past retention). ``alive``: something touched it at ``touched_ms`` (epoch
    ms), too recently to call it stalled. ``redrive``: nothing advanced it: publish ``groups`` again (its
    ``redrive``-th re-drive without progress; the run counts as touched at ``touched_ms``). ``failed``:
    re-driving did not help (or nothing could be re-driven), so it was failed with ``error``, naming
    ``step``.
    """

    run_id: str
    kind: Literal["gone", "alive", "redrive", "failed"]
    touched_ms: int = 0
    pipeline: str = ""
    correlation_id: str | None = None
    redrive: int = 0
    groups: tuple[StalledGroup, ...] = ()
    step: str | None = None
    error: str | None = None
    created_at_ms: int | None = None
