"""The run store's interface: everything a run needs that must outlive a message.

Two implementations keep the same semantics: :class:`~pipelines.store.redis.RedisRunStore` (one
atomic script per operation, pub/sub for waiting) and :class:`~pipelines.store.memory.MemoryRunStore`
(a lock and a condition variable). The interface is narrow on purpose so a durable SQL store can
follow.

Step states: ``pending`` → ``running`` → ``succeeded`` | ``retrying`` (→ ``running``) | ``failed``;
``skipped`` when the run failed or was cancelled before the step ran (or while it was waiting to run
again, or stopped it at a cancellation check). Run states: ``pending`` → ``running`` → ``succeeded`` |
``failed`` | ``cancelled``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from pipelines.plan import Frame

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


@dataclass(frozen=True)
class NewRun:
    """What starting a run writes, in one atomic operation."""

    run_id: str
    pipeline: str
    steps: Sequence[tuple[str, str]]
    """(step id, actor name) for every step, in plan order."""
    starts: Mapping[str, str]
    """Chain continuations: step id → JSON list of the leaves that start there."""
    entries: Mapping[str, Sequence[str]]
    """Chain continuations: step id → ids of those leaves."""
    idempotency_key: str | None = None
    correlation_id: str | None = None
    deadline_s: float | None = None
    """Seconds from creation after which no further step starts and the run fails."""
    trace_id: str | None = None
    """The run's trace (hex), to find it in Jaeger."""


@dataclass(frozen=True)
class StepStatus:
    """One step of a run: its id (path in the pipeline), actor, state, attempts and timings."""

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
    steps: tuple[StepStatus, ...] = field(default_factory=tuple)

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
        end = self.finished_at_ms or int(time.time() * 1000)
        return (end - self.created_at_ms) / 1000

    def count(self, state: StepState) -> int:
        """How many steps are in ``state``."""
        return sum(1 for step in self.steps if step.state == state)


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
ReopenKind = Literal["reopened", "done", "stopped", "missing"]


AdvanceKind = Literal["start", "waiting", "done", "duplicate", "stopped", "missing"]


@dataclass(frozen=True)
class Advance:
    """What follows a finished step.

    ``start``: publish ``leaves_json`` (the steps of ``node``) with ``value_json`` as their input.
    ``waiting``: a parallel barrier still waits on other members. ``done``: the run succeeded with
    ``value_json``. ``duplicate``/``stopped``/``missing``: nothing to do.
    """

    kind: AdvanceKind
    node: str | None = None
    value_json: str | None = None
    leaves_json: str | None = None
    member_trace_parents: tuple[str, ...] = ()
    """Trace parents of the members of the barrier this step released (a chord callback links them)."""
    chord_wait_ms: int | None = None
    """How long that barrier waited between its first and its last member."""
    run_created_at_ms: int | None = None
    """On ``done``: when the run was created."""


@dataclass(frozen=True)
class LeaseCheck:
    """A watchdog's look at a lease: ``alive`` (for ``wait_ms`` more), ``expired`` (taken over, with the
    job's ``record``), or ``gone`` (the job ended)."""

    kind: Literal["alive", "expired", "gone"]
    wait_ms: int = 0
    record: str | None = None


class RunStore(Protocol):
    """Run records, step states, chord barriers and idempotency keys, each with a retention TTL."""

    def create_run(self, run: NewRun) -> tuple[str, bool]:
        """Record a new run; returns (run id, created). An existing idempotency key returns its run."""

    def recent_runs(self, limit: int) -> list[str]:
        """Ids of the namespace's newest runs, newest first (at most the last 1,000)."""

    def create_runs(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        """:meth:`create_run` for several runs, in one round trip."""

    def run_for_key(self, idempotency_key: str) -> str | None:
        """The id of the run an idempotency key started, if it is still retained."""

    def claim_step(self, run_id: str, node: str, *, attempt: int, lease_ms: int) -> Claim:
        """Mark a step running under a lease, unless it must not run now (see :class:`Claim`).

        ``attempt`` is the message's own attempt number (1 + Dramatiq's retries): a newer attempt of a
        step still marked running is the retry of that step, not a duplicate.
        """

    def complete_step(
        self, run_id: str, node: str, up: Sequence[Frame], value_json: str | None, *, trace_parent: str = ""
    ) -> Advance:
        """Record a step's result and decide what follows, atomically.

        ``value_json=None`` re-drives a step that already succeeded: the continuation is returned again
        only if it never started, so a lost publish is repaired and a duplicate does nothing.
        """

    def fail_step(self, run_id: str, node: str, error: str, *, final: bool) -> int | None:
        """Record a failed attempt; a final failure fails the run (the first one wins).

        Returns:
            When this call failed the run: the run's creation time (epoch ms); else None.
        """

    def fail_run(self, run_id: str, error: str) -> None:
        """Fail a run that could not be started (its first publish failed)."""

    def cancel_run(self, run_id: str) -> bool:
        """Cancel a run that has not finished; steps not started yet never run. False if it had ended."""

    def get_run(self, run_id: str) -> RunStatus | None:
        """The run and every step, or None if unknown or past retention."""

    def run_state(self, run_id: str) -> RunState | None:
        """Only the run's state (no steps read), or None if unknown or past retention."""

    def wait_run(
        self,
        run_id: str,
        timeout_s: float | None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus | None:
        """Block until the run ends or ``timeout_s`` passes (no polling); returns the latest snapshot."""

    def reopen_step(self, run_id: str, node: str) -> tuple[ReopenKind, str | None]:
        """Let a dead-lettered step run again in its run (a failed run runs again); (outcome, run state)."""

    def claim_key(self, key: str, *, holder: str, lease_ms: int) -> tuple[KeyClaimKind, int]:
        """Claim an idempotency key: ("run", 0), ("done", 0) or ("busy", ms the lease has left)."""

    def finish_key(self, key: str, *, retention_s: int) -> None:
        """Remember ``key`` as done for ``retention_s``: later messages with it are skipped."""

    def release_key(self, key: str, *, holder: str) -> None:
        """Give up a claim after a failure (if ``holder`` still holds it), so a retry may claim it."""

    def mark_once(self, key: str, *, retention_s: int) -> bool:
        """True the first time ``key`` is marked within ``retention_s`` (replays, for instance)."""

    def forget_once(self, key: str) -> None:
        """Undo :meth:`mark_once` (what was marked did not happen after all)."""

    def report_progress(self, run_id: str, node: str, fraction: float | None, text: str) -> str | None:
        """Record a running step's progress (``fraction`` None records nothing); returns the run's state."""

    def open_lease(self, lease_id: str, *, holder: str, lease_ms: int, record: str) -> bool:
        """Open a long-running job's lease with its ``record`` (JSON); False if one is open already."""

    def renew_leases(self, holders: Mapping[str, str], *, lease_ms: int) -> list[str]:
        """Extend the leases (lease id → holder) this worker holds; returns those it no longer holds."""

    def close_lease(self, lease_id: str) -> None:
        """The job ended (or was handed to a retry): its watchdog has nothing left to do."""

    def take_expired_lease(self, lease_id: str) -> LeaseCheck:
        """Take over a lease whose holder stopped renewing it (atomically: one watchdog wins)."""

    def claim_tick(self, job: str, tick_ms: int, *, retention_s: int) -> bool:
        """True for the first claim of a scheduled job's tick (which also becomes its last tick)."""

    def last_tick(self, job: str) -> int | None:
        """The latest tick of ``job`` that was claimed (epoch ms), if any."""

    def tick_claims(self, job: str, tick_ms: int) -> int:
        """How many times one tick was claimed (more than one: a second scheduler sent it too)."""

    def reserve_slots(self, key: str, *, count: int, interval_ms: int) -> list[int]:
        """Reserve the next ``count`` slots ``interval_ms`` apart; returns the ms until each (rate limits)."""

    def ping(self) -> None:
        """Raise StoreUnavailable if the store does not answer."""

    def close(self) -> None:
        """Release connections."""
