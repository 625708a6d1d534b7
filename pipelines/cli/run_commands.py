"""The ``pipelines`` subcommands about runs: start one, show it (its steps' history and logs), list,
cancel and re-run them; each ``(app, args, out) -> exit status``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rich.text import Text

from pipelines.cli.output import Output, seconds, state_text, when
from pipelines.cli.status import outcome_line, status_json, status_tree
from pipelines.cli.step_history import logs_json, logs_text
from pipelines.flow.first_steps import first_steps

if TYPE_CHECKING:
    from pipelines.app import App
    from pipelines.store.base import RunStatus


#: Longest error shown in a row of `pipelines runs` (the run's status has all of it).
ROW_ERROR_CHARS = 80


def _print_status(app: App, out: Output, status: RunStatus) -> None:
    first = first_steps(app.store.run_first_steps(status.run_id))
    out.render(status_tree(status, app.store.run_continuations(status.run_id), first))
    outcome = outcome_line(status)
    if outcome is not None:
        out.line(outcome)


def run(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.errors import RunTimeout

    def created(run_id: str, new: bool) -> None:
        # Before the publish: a slow or stuck broker does not hide which run it is.
        out.line(run_id if new else f"{run_id} (already started with this idempotency key)")
        sys.stdout.flush()

    started = app.start_registered(
        args.name, kwargs=dict(args.args), idempotency_key=args.idempotency_key, on_created=created
    )
    if not (args.wait or args.timeout):
        return 0
    from pipelines.cli.readers import waiting_note

    if args.timeout is None:  # a wait without end: say now when no worker would start the run
        unread = waiting_note(app, started.status())
        if unread:
            print(f"pipelines: waiting for run {started.id}.{unread}", file=sys.stderr, flush=True)
    progress = _Progress()
    try:
        status = started.wait(args.timeout, on_change=progress.show)
    except RunTimeout as e:
        progress.clear()
        print(f"pipelines: {e}{waiting_note(app, started.status())}", file=sys.stderr)
        return 1
    progress.clear()
    _print_status(app, out, status)
    return 0 if status.state == "succeeded" else 1


class _Progress:
    """One self-rewriting line on a terminal's stderr while a run is awaited."""

    def __init__(self) -> None:
        self.active = sys.stderr.isatty()

    def show(self, status: RunStatus) -> None:
        if not self.active:
            return
        done, total = status.count("succeeded"), len(status.steps)
        filled = int(30 * done / total) if total else 0
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} steps, {status.state}  ")
        sys.stderr.flush()

    def clear(self) -> None:
        if self.active:
            sys.stderr.write("\r" + " " * 60 + "\r")


def status(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.runs import full_run_id

    found = app.get_run(full_run_id(app.store, args.run_id)).status()
    logs = app.store.step_logs(found.run_id, [step.node for step in found.steps]) if args.logs else None
    if args.json:
        first = first_steps(app.store.run_first_steps(found.run_id))
        shown = status_json(found, app.store.run_continuations(found.run_id), first)
        out.json(shown if logs is None else {**shown, "logs": logs_json(logs)})
        return 0
    _print_status(app, out, found)
    if logs is not None:
        out.line()
        out.render(logs_text(found, logs))
    return 0


def runs(app: App, args: argparse.Namespace, out: Output) -> int:
    page = app.runs(
        state=args.state, pipeline=args.pipeline, since=args.since, key=args.key, limit=args.limit, cursor=args.cursor
    )
    if args.json:
        out.json({"runs": [{**vars(run), "duration_s": run.duration_s} for run in page.runs], "cursor": page.cursor})
        return 0
    rows: list[list[str | Text]] = []
    for found in page.runs:
        error = (found.error or "").splitlines()[0][:ROW_ERROR_CHARS] if found.error else ""
        rows.append(
            [
                found.run_id,
                found.pipeline,
                state_text(found.state),
                when(found.created_at_ms),
                seconds(found.duration_s),
                f"{found.steps_done}/{found.steps_total}",
                Text(error, style="red"),
            ]
        )
    out.table(["RUN", "PIPELINE", "STATE", "STARTED (UTC)", "DURATION", "STEPS", "ERROR"], rows)
    if page.cursor:
        print(f"more: pipelines runs ... --cursor {page.cursor}", file=sys.stderr)
    return 0


def cancel(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.runs import full_run_id

    handle = app.get_run(full_run_id(app.store, args.run_id))
    if handle.cancel():
        out.line(f"{handle.id} cancelled")
        return 0
    out.line(f"{handle.id} had already ended ({handle.status().state}); nothing to cancel")
    return 1


def rerun(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.runs import full_run_id

    def created(run_id: str, new: bool) -> None:
        out.line(run_id)  # before the publish, as `pipelines run` prints it
        sys.stdout.flush()

    app.rerun(full_run_id(app.store, args.run_id), on_created=created)
    return 0
