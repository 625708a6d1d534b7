"""Everything the web console reads from the app and does to it, in one place, typed.

The pages and the JSON API call :class:`ConsoleData` and nothing else of the app: runs listed with
filters and a cursor, one run with its shape and a step's detail, cancel; dead letters by queue,
shown, replayed one by one or by filter, purged; queues and workers (:mod:`pipelines.console.overview`).
Values from runs and messages are returned as they are stored (sealed values stay sealed: the console
holds no keys); errors and tracebacks pass through the secret masking.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from pipelines import options as opt
from pipelines.app import App
from pipelines.config.masking import mask_text
from pipelines.console.overview import QueuesOverview
from pipelines.console.shape import build_shape, is_parallel
from pipelines.console.views import (
    LetterView,
    Overview,
    RunFilter,
    RunPage,
    RunRow,
    RunView,
    StepDetail,
    StepView,
)
from pipelines.dead_letters.queues import DeadLetter
from pipelines.flow.first_steps import first_steps
from pipelines.runs import full_run_id
from pipelines.store.base import RunSummary, StepStatus
from pipelines.wire.naming import dead_letter_queue


def _clean(text: str | None) -> str | None:
    return mask_text(text) if text else None


def _step_view(step: StepStatus, now_ms: int) -> StepView:
    took = None
    if step.started_at_ms:
        took = ((step.finished_at_ms or now_ms) - step.started_at_ms) / 1000
    return StepView(
        node=step.node,
        actor=step.actor,
        state=step.state,
        attempts=step.attempts,
        started_at_ms=step.started_at_ms,
        finished_at_ms=step.finished_at_ms,
        duration_s=took,
        progress=step.progress,
        progress_text=step.progress_text,
        error=_clean(step.error),
        worker=step.worker,
        history=tuple(replace(entry, error=_clean(entry.error)) for entry in step.history),
    )


def _row(run: RunSummary) -> RunRow:
    return RunRow(
        run_id=run.run_id,
        pipeline=run.pipeline,
        state=run.state,
        created_at_ms=run.created_at_ms,
        finished_at_ms=run.finished_at_ms,
        duration_s=run.duration_s,
        steps_done=run.steps_done,
        steps_total=run.steps_total,
        error=_clean(run.error),
        failed_step=run.failed_step,
    )


def _letter(letter: DeadLetter, now_s: float) -> LetterView:
    reason = letter.reason
    message = letter.message
    age = None
    if reason.at:
        try:
            age = max(0.0, now_s - datetime.fromisoformat(reason.at).timestamp())
        except ValueError:
            age = None
    return LetterView(
        id=letter.id,
        queue=letter.queue,
        source_queue=letter.source_queue,
        actor=reason.actor or (message.actor_name if message else None),
        reason=reason.reason,
        error_type=reason.error_type,
        error=_clean(reason.error),
        traceback=_clean(reason.traceback),
        attempts=reason.attempts,
        run_id=reason.run_id,
        step=reason.step,
        correlation_id=reason.correlation_id,
        at=reason.at,
        age_s=age,
        args=list(message.args) if message else None,
        kwargs=dict(message.kwargs) if message else None,
        sealed=bool(message and opt.SEALED in message.options),
        body=None if message else letter.body.decode(errors="replace")[:4000],
    )


class ConsoleData:
    """The console's one way into the app (see the module docstring)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._queues = QueuesOverview(app)

    # -- runs -------------------------------------------------------------------------------------

    def runs(self, where: RunFilter, *, limit: int = 25, cursor: str | None = None) -> RunPage:
        """Runs newest first that match ``where``, ``limit`` at most, from ``cursor`` (``App.runs``).

        Raises:
            InvalidQuery: An unknown state or a bad cursor.
        """
        page = self.app.runs(
            state=where.state,
            pipeline=where.pipeline,
            since=where.since_ms,
            until=where.until_ms,
            key=where.key,
            limit=limit,
            cursor=cursor,
        )
        return RunPage(tuple(_row(run) for run in page.runs), page.cursor)

    def pipelines(self) -> list[str]:
        """Names of the registered pipelines (for the filter's suggestions)."""
        return sorted(self.app.pipelines)

    def run(self, run_id: str, *, fold_at: int = 8, expand: tuple[str, ...] = ()) -> RunView:
        """One run with its steps and shape; parallel nodes with more than ``fold_at`` members fold.

        Raises:
            RunNotFound: No such run, or past its retention.
        """
        status = self.app.get_run(full_run_id(self.app.store, run_id)).status()
        now_ms = int(time.time() * 1000)
        steps = tuple(_step_view(step, now_ms) for step in status.steps)
        continuations = self.app.store.run_continuations(status.run_id)
        shape = build_shape(
            [(s.node, s.actor, s) for s in steps],
            continuations,
            fold_at=fold_at,
            expand=expand,
            state_of={s.node: s.state for s in steps},
        )
        counts: dict[str, int] = {}
        for step in steps:
            counts[step.state] = counts.get(step.state, 0) + 1
        jaeger = self.app.settings.ui.jaeger_url.rstrip("/")
        return RunView(
            run_id=status.run_id,
            pipeline=status.pipeline,
            state=status.state,
            created_at_ms=status.created_at_ms,
            started_at_ms=status.started_at_ms,
            finished_at_ms=status.finished_at_ms,
            duration_s=status.duration_s,
            error=_clean(status.error),
            failed_step=status.failed_step,
            correlation_id=status.correlation_id,
            trace_id=status.trace_id,
            trace_url=f"{jaeger}/trace/{status.trace_id}" if jaeger and status.trace_id else None,
            trace_sampled=status.trace_sampled,
            result_json=status.result_json,
            steps=steps,
            counts=counts,
            shape=shape,
            input=orjson.loads(status.input_json) if status.input_json is not None else None,
            first_steps=first_steps(self.app.store.run_first_steps(status.run_id)),
            registered=status.registered,
            rerun_of=status.rerun_of,
            reruns=status.reruns,
        )

    def step(self, run: RunView, node: str) -> StepDetail | None:
        """A step's arguments, result, dead letters and logs (None if the run has no such step)."""
        step = next((s for s in run.steps if s.node == node), None)
        if step is None:
            return None
        letters: tuple[LetterView, ...] = ()
        if step.state in ("failed", "retrying", "skipped") or step.attempts > 1:
            letters = tuple(
                letter for letter in self.dead_letters(queue=step.actor, run_id=run.run_id) if letter.step == node
            )
        args: list[Any] | None = None
        kwargs: dict[str, Any] | None = None
        source = None
        continuations = self.app.store.run_continuations(run.run_id)
        started = run.first_steps if isinstance(run.first_steps, tuple) else ()
        first = next((f for f in started if f.node == node), None)
        if letters and letters[-1].sealed:
            source = "sealed"  # the actor encrypts its arguments: they travel in the seal, not in args
        elif letters:
            args, kwargs, source = letters[-1].args, letters[-1].kwargs, "dead letter"
        elif first is not None:
            args, kwargs, source = first.args, first.kwargs, "start"
        else:
            leaf = next(
                (
                    leaf
                    for leaves in continuations.values()
                    for leaf in orjson.loads(leaves)
                    if leaf.get("node") == node
                ),
                None,
            )
            if leaf is not None:
                args, kwargs, source = list(leaf.get("args", [])), dict(leaf.get("kwargs", {})), "plan"
        parent, _, index = node.rpartition(".")
        parallel = is_parallel(parent, [s.node for s in run.steps], continuations)
        result = self.app.store.step_result(run.run_id, node, (parent, int(index)) if parallel else None)
        logs = tuple(
            replace(log, records=tuple(replace(r, text=mask_text(r.text)) for r in log.records))
            for log in self.app.store.step_logs(run.run_id, [node]).get(node, ())
        )
        return StepDetail(step, args, kwargs, source, result, letters, logs)

    def cancel(self, run_id: str) -> tuple[bool, str]:
        """Cancel a run: (whether this cancelled it, its state now).

        Raises:
            RunNotFound: No such run.
        """
        run = self.app.get_run(full_run_id(self.app.store, run_id))
        cancelled = run.cancel()
        return cancelled, run.status().state

    def rerun(self, run_id: str) -> str:
        """Re-run an ended run with its input (:meth:`App.rerun <pipelines.app.App.rerun>`): the new run's id.

        Raises:
            RunNotFound, CannotRerun: As ``pipelines rerun`` says.
        """
        return self.app.rerun(full_run_id(self.app.store, run_id)).id

    # -- dead letters -----------------------------------------------------------------------------

    def dead_letter_queues(self) -> dict[str, str]:
        """Dead-letter queue → the actor whose queue it serves."""
        topology = self.app.broker.topology
        return {dead_letter_queue(queue): actor for actor, queue in sorted(topology.actor_queues.items())}

    def dead_letters(
        self, *, queue: str | None = None, reason: str | None = None, run_id: str | None = None, limit: int = 200
    ) -> list[LetterView]:
        """Dead letters (of an actor, actor queue or dead-letter queue), oldest first per queue.

        Raises:
            DeadLetterError: ``queue`` names nothing in this namespace.
        """
        now = time.time()
        return [
            view
            for view in (_letter(letter, now) for letter in self.app.dead_letters.list(queue, limit=limit))
            if (reason is None or view.reason == reason) and (run_id is None or view.run_id == run_id)
        ]

    def dead_letter(self, letter_id: str) -> LetterView:
        """One dead letter.

        Raises:
            DeadLetterNotFound: No dead letter has that id.
        """
        return _letter(self.app.dead_letters.show(letter_id), time.time())

    def replay(self, letter_id: str) -> tuple[str, str]:
        """Send a dead letter (its id, or the start of it) back to its actor (inside its run); its whole id,
        and what happened.

        Raises:
            DeadLetterNotFound, CannotReplay, AmbiguousId: As ``pipelines dlq replay`` says.
        """
        letter_id = self.app.dead_letters.full_id(letter_id)
        return letter_id, self.app.dead_letters.replay(letter_id)

    def replay_all(self, *, queue: str | None = None, reason: str | None = None) -> dict[str, str]:
        """Replay every dead letter of a filter; what happened to each, by id."""
        return dict(self.app.dead_letters.replay_all(queue, reason=reason))

    def purge(self, *, queue: str | None = None) -> int:
        """Delete the dead letters (of ``queue``) for good; how many."""
        return self.app.dead_letters.purge(queue)

    # -- queues and workers -----------------------------------------------------------------------

    def overview(self) -> Overview:
        """Every actor queue and the workers (see :class:`~pipelines.console.overview.QueuesOverview`)."""
        return self._queues.overview()
