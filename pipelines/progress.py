"""Progress reports and cooperative cancellation, called from inside an actor.

A long job says how far it got with ``report_progress(0.4, "3/10 files")``: the step's progress is
recorded in its run (``pipelines status``, ``Run.status()``), and if the run was cancelled meanwhile
the call raises [`Cancelled`][pipelines.errors.Cancelled], which stops the job cleanly (no retry, no dead
letter; the run stays ``cancelled``). ``check_cancelled()`` does the same without a report. Both work
in any pipeline step, and in a ``long_running`` actor also when its lease was taken over by a
watchdog (the job is being run again elsewhere). Outside a step they only log.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from pipelines.errors import Cancelled
from pipelines.store.roles import StepProgress

logger = logging.getLogger(__name__)

#: Reports closer together than this (seconds) are not written, except the final one (fraction 1).
MIN_REPORT_INTERVAL_S = 0.5


@dataclass
class Job:
    """What the worker knows about the message an actor is running (set by the ``Leases`` middleware)."""

    store: StepProgress
    run_id: str | None
    node: str | None
    lease_id: str | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    """Set when the job's lease was taken over: another worker runs it now."""
    last_report: float = 0.0


_local = threading.local()


def enter(job: Job) -> None:
    """Make ``job`` the current thread's job (the middleware calls this before the actor runs)."""
    _local.job = job


def leave() -> None:
    """The current thread's actor ended."""
    _local.job = None


def current_job() -> Job | None:
    """The job the current thread runs, if it is a pipeline step or a long-running job."""
    job: Job | None = getattr(_local, "job", None)
    return job


def report_progress(fraction: float, text: str = "") -> None:
    """Record how far the current job got (``fraction`` from 0 to 1, and a short text).

    Raises:
        Cancelled: The job's run was cancelled, or its lease was taken over; let it propagate.
        ValueError: ``fraction`` is not between 0 and 1.
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"report_progress: fraction={fraction!r} must be between 0 and 1.")
    _check(fraction, text)


def check_cancelled() -> None:
    """Stop here if the current job's run was cancelled (see [`report_progress`][pipelines.progress.report_progress]).

    Raises:
        Cancelled: As for [`report_progress`][pipelines.progress.report_progress].
    """
    _check(None, "")


def _check(fraction: float | None, text: str) -> None:
    job = current_job()
    if job is None or job.run_id is None or job.node is None:
        if job is not None and job.lost.is_set():
            raise Cancelled("This job's lease was taken over by a watchdog: it runs again elsewhere.")
        logger.debug("Progress %s %r outside a pipeline step: not recorded.", fraction, text)
        return
    if job.lost.is_set():
        raise Cancelled(f"Step {job.node} of run {job.run_id} lost its lease: it runs again elsewhere.")
    now = time.monotonic()
    if fraction is not None and fraction < 1 and now - job.last_report < MIN_REPORT_INTERVAL_S:
        return
    job.last_report = now
    state = job.store.report_progress(job.run_id, job.node, fraction, text)
    if state == "deadline":
        job.store.enforce_deadline(job.run_id)
        state = "failed"
    if state == "cancelled":
        raise Cancelled(f"Run {job.run_id} was cancelled; step {job.node} stops here.")
    if state == "failed":
        raise Cancelled(
            f"Run {job.run_id} failed (its deadline passed, or another step failed); step {job.node} stops here."
        )
