"""Run deadlines, checked when they pass: a run still going then is failed, naming the step that ran.

A run started with ``deadline_s`` gets one more message, to the system actor ``pipelines_run_deadline``
(queue ``pipelines``), delayed in RabbitMQ's delay queues until just after its deadline. It fails the run
if it is still pending or running (``deadline exceeded``, ``failed_step`` the step that was running) and
marks its running steps failed, so that their next ``report_progress()`` or ``check_cancelled()`` raises
``Cancelled``. Claims, completions and progress reports check the deadline too (the next store touch),
so a lost check only delays the failure until then.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import dramatiq

from pipelines.broker.common import PipelineBroker
from pipelines.errors import PipelinesError
from pipelines.store.roles import StepProgress

logger = logging.getLogger(__name__)

#: The system actor that checks a run's deadline when it passes (declared with the first actor).
DEADLINE_CHECK = "pipelines_run_deadline"
#: Its Dramatiq queue: served by every worker started without --queues.
DEADLINE_QUEUE = "pipelines"
#: How long after a deadline its check runs, in ms.
DEADLINE_MARGIN_MS = 100


def deadline_check(
    broker: PipelineBroker, run_id: str, deadline_s: float | None
) -> tuple[dramatiq.Message[Any], int] | None:
    """A new run's deadline check and its delay in ms (None: the run has no deadline)."""
    if deadline_s is None or DEADLINE_CHECK not in broker.actors:
        return None
    return broker.get_actor(DEADLINE_CHECK).message(run_id), round(deadline_s * 1000) + DEADLINE_MARGIN_MS


def schedule_deadline_checks(broker: PipelineBroker, run_ids: Sequence[str], deadline_s: float | None) -> None:
    """Send each new run's deadline check, due when its deadline passes (if it has one)."""
    checks = [check for run_id in run_ids if (check := deadline_check(broker, run_id, deadline_s)) is not None]
    if not checks:
        return
    try:
        broker.enqueue_many([message for message, _ in checks], delay=checks[0][1])
    except PipelinesError:
        # The runs started; their claims, completions and progress reports still check the deadline.
        logger.exception("Could not schedule the deadline check of %d run(s).", len(run_ids))


def check_deadline(broker: PipelineBroker, store: StepProgress, run_id: str) -> None:
    """The deadline check: fail the run if it is past its deadline, or look again when it will be."""
    check = store.enforce_deadline(run_id)
    if check.kind == "wait":
        broker.enqueue(broker.get_actor(DEADLINE_CHECK).message(run_id), delay=check.wait_ms + DEADLINE_MARGIN_MS)
    elif check.kind == "failed":
        running = f" while step {check.step} ran" if check.step else " before any step ran"
        logger.warning("Run %s passed its deadline%s: failed with 'deadline exceeded'.", run_id, running)
