"""A step's history (its attempts and replays) and its attempts' log records, as ``pipelines status``
prints them: the history under the step in the run's tree, the logs (``--logs``) after it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.text import Text

from pipelines.cli.output import STATE_STYLES, seconds
from pipelines.config.masking import mask_text
from pipelines.store.base import RunStatus, StepStatus
from pipelines.store.step_history import AttemptLog, HistoryEntry

#: What an attempt without an end shows, when it is not running: it ended without a record.
NO_END = "no end recorded (its worker stopped, or its lease lapsed)"


def clock(epoch_ms: int) -> str:
    """An epoch-ms time as UTC, to the millisecond."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def shows_history(step: StepStatus) -> bool:
    """Whether the tree lists the step's history: it ran more than once, or was replayed."""
    return len(step.history) > 1 or any(entry.kind == "replay" for entry in step.history)


def history_line(step: StepStatus, entry: HistoryEntry) -> Text:
    """One attempt (its number, start, outcome, duration, worker, error) or one replay (when, why)."""
    if entry.kind == "replay":
        line = Text(f"replayed  {clock(entry.at_ms)}", style="magenta")
        return line.append(f"  {mask_text(entry.error or '')}".rstrip(), style="dim")
    line = Text(f"attempt {entry.attempt}  {clock(entry.at_ms)}  ")
    latest = entry.attempt == step.attempts
    outcome = entry.outcome or ("running" if latest and step.state == "running" else NO_END)
    line.append(outcome, style=STATE_STYLES.get(outcome, "dim"))
    if entry.ended_at_ms is not None:
        line.append(f"  {seconds((entry.ended_at_ms - entry.at_ms) / 1000)}")
    if entry.worker:
        line.append(f"  on {entry.worker}", style="dim")
    if entry.error:
        line.append(f"  {mask_text(entry.error)}", style="red")
    return line


def logs_text(status: RunStatus, logs: dict[str, tuple[AttemptLog, ...]]) -> Text:
    """Each step's kept log records, attempt by attempt, in plan order (a record's later lines indented)."""
    text = Text()
    for step in status.steps:
        for attempt in logs.get(step.node, ()):
            dropped = f" ({attempt.dropped} earlier records dropped)" if attempt.dropped else ""
            text.append(f"logs of step {step.node} ({step.actor}), attempt {attempt.attempt}{dropped}\n", style="bold")
            for record in attempt.records:
                text.append(f"  {clock(record.at_ms)} ", style="dim")
                text.append(f"{record.level} ", style="red" if record.level in ("ERROR", "CRITICAL") else "")
                text.append(f"{record.logger}  ", style="dim")
                text.append(mask_text(record.text).replace("\n", "\n    ") + "\n")
    if not text.plain:
        text.append("no step of this run kept log records\n", style="dim")
    return text


def logs_json(logs: dict[str, tuple[AttemptLog, ...]]) -> dict[str, Any]:
    """The kept log records by step, attempt by attempt, for ``--json``."""
    return {
        node: [
            {
                "attempt": attempt.attempt,
                "dropped": attempt.dropped,
                "records": [
                    {"at_ms": r.at_ms, "level": r.level, "logger": r.logger, "text": mask_text(r.text)}
                    for r in attempt.records
                ],
            }
            for attempt in attempts
        ]
        for node, attempts in logs.items()
    }
