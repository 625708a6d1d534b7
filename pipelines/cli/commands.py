"""The ``pipelines`` subcommands, each ``(app, args, out) -> exit status``; the parser is in the package."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text

from pipelines.cli import namespace_views
from pipelines.cli.output import Output
from pipelines.cli.run_commands import cancel, rerun, run, runs, status
from pipelines.errors import PipelinesError

if TYPE_CHECKING:
    from pipelines.app import App


class UsageError(PipelinesError):
    """A command given in a way that cannot work, found past argparse (one line, exit status 2)."""


def publish(app: App, args: argparse.Namespace, out: Output) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as e:
        raise UsageError(f"The payload is not JSON ({e}). Quote it: '{{\"order_id\": 1}}'.") from None
    out.line(app.publish(args.topic, payload))
    return 0


def dlq(app: App, args: argparse.Namespace, out: Output) -> int:
    letters = app.dead_letters
    if args.dlq_command == "list":
        return _dlq_list(app, args, out)
    if args.dlq_command == "show":
        return _dlq_show(app, args, out)
    if args.dlq_command == "replay":
        if args.all:
            outcomes = letters.replay_all(args.queue)
            for letter_id, outcome in outcomes.items():
                out.line(f"{letter_id}  {outcome}")
            return 1 if any(o.startswith("not replayed") for o in outcomes.values()) else 0
        letter_id = letters.full_id(args.id, queue=args.queue)
        out.line(f"{letter_id}  {letters.replay(letter_id, queue=args.queue)}")
        return 0
    if not args.yes:
        raise UsageError("Purging deletes dead letters for good; add --yes to confirm.")
    out.line(f"purged {letters.purge(args.queue)} dead letter(s)")
    return 0


def _dlq_list(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.dead_letters.queues import describe

    found = describe(app.dead_letters.list(args.queue, limit=args.limit))
    if args.json:
        out.json(found)
        return 0
    rows: list[list[str | Text]] = []
    for entry in found:
        where = f"run {entry['run_id']} step {entry.get('step')}" if entry.get("run_id") else entry.get("actor", "")
        error = f"{entry.get('error_type', '')}: {entry.get('error', '')}" if entry.get("error_type") else ""
        rows.append([entry["id"], entry["dead_letter_queue"], entry["reason"], where, Text(error, style="red")])
    out.table(["ID", "DEAD-LETTER QUEUE", "REASON", "WHERE", "ERROR"], rows)
    out.line(f"{len(found)} dead letter(s)")
    return 0


def _dlq_show(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.dead_letters.queues import describe

    letter = app.dead_letters.show(args.id)
    shown = describe([letter])[0]
    shown["message"] = letter.message.asdict() if letter.message else letter.body.decode(errors="replace")
    if args.json:
        out.json(shown)
        return 0
    message = shown.pop("message")
    traceback = shown.pop("traceback", None)
    out.table(["FIELD", "VALUE"], [[key, str(value)] for key, value in shown.items()])
    out.line(f"message: {json.dumps(message, default=str)}")
    if traceback:
        out.line(str(traceback))
    return 0


def keda(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.cli.keda import print_scaled_object

    return print_scaled_object(app, args)


def top(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.cli.top import run_top

    return run_top(app, interval_s=args.interval, once=args.once)


def ui(app: App, args: argparse.Namespace, out: Output) -> int:
    try:
        from pipelines.console.server import serve
    except ImportError as e:
        raise UsageError(
            f"The web console needs the ui extra ({e.name} is not installed): pip install 'rabbit-pipelines[ui]'."
        ) from None
    return serve(app, host=args.host or app.settings.ui.host, port=args.port or app.settings.ui.port)


COMMANDS: dict[str, Callable[[App, argparse.Namespace, Output], int]] = {
    "dlq": dlq,
    "keda": keda,
    "top": top,
    "run": run,
    "runs": runs,
    "status": status,
    "cancel": cancel,
    "rerun": rerun,
    "publish": publish,
    "topology": namespace_views.topology,
    "queues": namespace_views.queues,
    "workers": namespace_views.workers,
    "ui": ui,
}


def print_config(masked: dict[str, Any]) -> None:
    """The effective configuration (secrets masked), as JSON: it is nested, and JSON reads as it is."""
    sys.stdout.write(json.dumps(masked, indent=2) + "\n")
