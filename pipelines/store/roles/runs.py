"""The roles about runs and their steps: started, advanced, read, followed, replayed, kept from stalling
(the table of every role is in :mod:`pipelines.store.roles`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from pipelines.store.base import (
    Advance,
    Claim,
    DeadlineCheck,
    LocalOffer,
    NewRun,
    Renewal,
    ReopenKind,
    RunFeed,
    RunPage,
    RunQuery,
    RunState,
    RunStatus,
    StallCheck,
)
from pipelines.store.step_history import AttemptLog
from pipelines.wire.steps import Frame


class RunStates(Protocol):
    """The one read both the runtime and callers need: a run's state alone."""

    def run_state(self, run_id: str) -> RunState | None:
        """Only the run's state (no steps read), or None if unknown or past retention."""


class RunSteps(RunStates, Protocol):
    """Runs started and advanced step by step, each decision atomic."""

    def create_run(self, run: NewRun) -> tuple[str, bool]:
        """Record a new run; returns (run id, created). A run that exists already is returned as it is.

        A run with an idempotency key has the key's id (``naming.run_id_for_key``), so a second start
        with the key returns the first run (ValueError for a keyed run with another id).
        """

    def create_runs(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        """:meth:`create_run` for several runs, in one round trip."""

    def claim_step(
        self,
        run_id: str,
        node: str,
        *,
        attempt: int,
        lease_ms: int,
        worker: str = "",
        actor: str | None = None,
        up: Sequence[Frame] | None = None,
    ) -> Claim:
        """Mark a step running under a lease, unless it must not run now (see :class:`Claim`).

        ``attempt`` is the message's own attempt number (1 + Dramatiq's retries): a newer attempt of a
        step still marked running is the retry of that step, not a duplicate. ``worker`` (``host:pid/thread``)
        is recorded as the step's worker when the claim succeeds; the latest attempt's stays shown.
        ``actor`` and ``up`` are what a message says of its step: given, they must be the stored plan's.

        Raises:
            AddressNotInPlan: The message's actor or ancestors are not the stored plan's (nothing changes).
        """

    def complete_step(
        self,
        run_id: str,
        node: str,
        up: Sequence[Frame],
        value_json: str | None,
        *,
        trace_parent: str = "",
        claim: int | None = None,
        local: LocalOffer | None = None,
        local_after: str | None = None,
        worker: str = "",
        logs: AttemptLog | None = None,
    ) -> Advance:
        """Record a step's result and decide what follows, atomically.

        ``value_json=None`` re-drives a step that already succeeded: the continuation is returned again
        only if it never started, so a lost publish is repaired and a duplicate does nothing. ``claim``
        (the attempt the step was claimed with) fences a late completion: ``lost`` when the step was
        claimed again since, and nothing is recorded. ``local`` offers this worker to run what follows
        (``local`` when it claimed it: complete-and-claim); ``local_after`` is the step a local step
        being completed followed (its entry in the index of local steps ends); ``worker``, the worker
        that ran it (a local step was claimed by the one that ran the step before); ``logs``, the records
        the attempt logged, kept with the step in the same round trip (not when the claim was lost).
        """

    def fail_step(
        self,
        run_id: str,
        node: str,
        error: str,
        *,
        final: bool,
        claim: int | None = None,
        logs: AttemptLog | None = None,
    ) -> int | None:
        """Record a failed attempt (and the records it logged); a final failure fails the run (the first
        one wins).

        Returns:
            When this call failed the run: the run's creation time (epoch ms); else None.

        Raises:
            ClaimLost: ``claim`` (the attempt the step was claimed with) no longer holds the step.
        """

    def fail_run(self, run_id: str, error: str) -> None:
        """Fail a run that could not be started (its first publish failed)."""


class Holds(Protocol):
    """Keeping what a worker holds while it runs: the leases of its steps and its idempotency keys."""

    def renew_holds(self, steps: Mapping[tuple[str, str], int], keys: Mapping[str, str], *, lease_ms: int) -> Renewal:
        """Renew, in one round trip, the leases of ``steps`` ((run, step) → the claim each runs under)
        and the claims of ``keys`` (key → holder) for ``lease_ms``; what could not be renewed."""


class RunViews(RunStates, Protocol):
    """Runs as callers see them: read, awaited, cancelled, found by key or by age."""

    def get_run(self, run_id: str) -> RunStatus | None:
        """The run and every step, or None if unknown or past retention."""

    def wait_run(
        self,
        run_id: str,
        timeout_s: float | None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus | None:
        """Block until the run ends or ``timeout_s`` passes (no polling); returns the latest snapshot."""

    def cancel_run(self, run_id: str) -> bool:
        """Cancel a run that has not finished; steps not started yet never run. False if it had ended."""

    def link_rerun(self, run_id: str, rerun_id: str) -> None:
        """Record that run ``rerun_id`` re-runs ``run_id`` (its ``reruns``), while ``run_id`` is retained."""

    def run_for_key(self, idempotency_key: str) -> str | None:
        """The id of the run an idempotency key started, if it is still retained."""

    def recent_runs(self, limit: int) -> list[str]:
        """Ids of the namespace's newest runs, newest first."""

    def run_ids_starting(self, prefix: str, *, limit: int) -> list[str]:
        """Ids of retained runs that begin with ``prefix``, ``limit`` at most, in no order."""

    def find_runs(self, query: RunQuery, *, limit: int, cursor: str | None = None) -> RunPage:
        """Runs that match ``query``, newest first, ``limit`` at most, from ``cursor`` (a previous page's).

        Every retained run can be found: the store indexes runs by creation time, and by pipeline, as it
        creates them, and drops entries of runs created more than a retention ago.

        Raises:
            InvalidQuery: ``cursor`` is not one a page of this store returned.
        """


class RunFeeds(Protocol):
    """Subscriptions to run changes, for a watcher that serves many waiters at once."""

    def run_feed(self) -> RunFeed:
        """A new subscription following no run yet."""


class RunPlans(Protocol):
    """What a run keeps besides its steps, read to show the run as a whole (its shape, arguments, results)."""

    def run_continuations(self, run_id: str) -> dict[str, str]:
        """Where the run's chains continue: step id → JSON list of the leaves that start there
        (``Leaf.to_json``, with their bound arguments). Empty for a run without any, or unknown. The run's
        first steps, which the store keeps too, are not a continuation."""

    def run_first_steps(self, run_id: str) -> tuple[str, str] | None:
        """The run's first steps as it was started: (JSON list of their leaves, ``Leaf.to_json`` with their
        bound arguments; JSON ``[args, kwargs]`` that each receives after those), each a sealed value when
        one of their actors encrypts. None for an unknown run, or one that kept none."""

    def step_result(self, run_id: str, node: str, member_of: tuple[str, int] | None = None) -> str | None:
        """The JSON result step ``node`` recorded, None until it has (or past retention).

        ``member_of`` is (parallel node, index) for a step that is a direct member of a parallel node:
        its result is kept with that node's barrier, not with the chain results.
        """


class StepProgress(Protocol):
    """Progress reports of running steps, and their run's deadline."""

    def report_progress(self, run_id: str, node: str, fraction: float | None, text: str) -> str | None:
        """Record a running step's progress (``fraction`` None records nothing); returns the run's state,
        or ``deadline`` when the run passed its deadline (then :meth:`enforce_deadline` fails it)."""

    def enforce_deadline(self, run_id: str) -> DeadlineCheck:
        """Fail the run if it passed its deadline, naming the step that was running (that step, and any
        other running, is marked failed, so its progress reports and cancel checks raise)."""


class StepReplays(Protocol):
    """A dead-lettered step given another chance in its run."""

    def reopen_step(self, run_id: str, node: str, *, reason: str = "") -> tuple[ReopenKind, str | None]:
        """Let a dead-lettered step run again in its run (a failed run runs again); its history keeps the
        replay, with ``reason`` (which dead letter, and why it died).

        Returns:
            The outcome, and the run's state when the outcome is ``stopped``, the continuation the step
            starts in when it is ``not due`` (its run has not released the step: its letter is of a message
            the run did not send, and nothing changes), else None.
        """


class StepLogs(Protocol):
    """What steps logged while they ran, kept with them for their run's retention."""

    def step_logs(self, run_id: str, nodes: Sequence[str]) -> dict[str, tuple[AttemptLog, ...]]:
        """The kept log records of each of ``nodes`` that has any, by step, oldest attempt first: the
        newest within ``store.step_log_records`` and ``store.step_log_bytes`` per step."""


class StallChecks(Protocol):
    """Runs still going that nothing advances any more: kept alive while a step runs, found when stalled."""

    def keep_alive(self, run_ids: Collection[str]) -> int:
        """Touch these runs (a step of each runs in the caller's process), so that no sweep takes them for
        stalled; returns how many were still going."""

    def sweep_lapsed(self, *, lease_ms: int, limit: int) -> list[StallCheck]:
        """Look at up to ``limit`` runs whose local step (claimed where the step before it finished) is
        due in the index of local steps; hand back its steps whose lease lapsed, to publish again
        (``redrive``: nothing of a local step is in RabbitMQ), and keep the index (``lease_ms``: when to
        look again at a step re-driven)."""

    def sweep_stalled(self, *, stalled_after_ms: int, redrives: int, gap_ms: int, limit: int) -> list[StallCheck]:
        """Look at up to ``limit`` running runs untouched for ``stalled_after_ms``, oldest first, found
        through the index of running runs (never by scanning keys), and decide each atomically.

        A run none of whose steps holds a live lease, touched by nothing for ``stalled_after_ms``, is
        stalled: its idle steps (pending, retrying, or running past their lease, where steps started
        already) are to be published again (``redrive``), each re-drive without a step finishing waiting
        twice as long as the one before; after ``redrives`` of them, or when it has no step to publish,
        the run is failed with the reason. The stall clock starts again after a sweep that comes more than
        ``gap_ms`` after the previous one (the store, or every worker, was down meanwhile).
        """
