"""The ``pipelines`` subcommands, each ``(app, args, out) -> exit status``; the parser is in the package."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text

from pipelines.cli.output import Output, seconds
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


def topology(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.cli.readers import framework_note, unread_queues
    from pipelines.profiles.kinds import profile_of, summary

    declared = app.broker.topology
    unread = unread_queues(app)
    actors: list[dict[str, Any]] = []
    for actor_name in sorted(declared.actor_queues):
        actor = app.broker.get_actor(actor_name)
        actors.append(
            {
                "name": actor_name,
                "profile": profile_of(actor),
                "queue_name": actor.queue_name,
                "queues": list(declared.consume_queues[actor_name]),
                "summary": summary(actor),
            }
        )
    data: dict[str, Any] = {
        "namespace": declared.namespace,
        "broker": app.settings.broker.masked_url,
        "exchanges": [{"name": e.name, "type": e.type} for e in declared.exchanges],
        "actors": actors,
        "queues": [
            {
                "name": q.name,
                "role": q.role,
                "type": q.arguments.get("x-queue-type", ""),
                "no_consumer": None if unread is None else q.name in unread,
            }
            for q in declared.queues
        ],
        "bindings": [
            {"exchange": b.exchange, "queue": b.queue, "routing_key": b.routing_key, "arguments": b.arguments}
            for b in declared.bindings
        ],
        "pipelines": sorted(app.pipelines),
    }
    if args.json:
        out.json(data)
        return 0
    out.line(f"namespace {data['namespace']} on {data['broker']}")
    out.table(["EXCHANGE", "TYPE"], [[e["name"], e["type"]] for e in data["exchanges"]], title="exchanges")
    rows: list[list[str | Text]] = []
    for entry in actors:
        queues = entry["queues"]
        where = (
            queues[0] if len(queues) == 1 else f"{len(queues)} partitions {queues[0]}..{queues[-1].rsplit('.', 1)[1]}"
        )
        rows.append([entry["name"], entry["profile"], entry["queue_name"], where, entry["summary"]])
    out.table(["ACTOR", "PROFILE", "QUEUE", "CONSUMES", "DECLARED"], rows, title="actors")
    queue_rows: list[list[str | Text]] = [
        [q["name"], q["role"], q["type"], Text("no consumer" if q["no_consumer"] else "", "yellow")]
        for q in data["queues"]
    ]
    out.table(["QUEUE", "ROLE", "TYPE", "NOTE"], queue_rows, title="queues")
    note = None if unread is None else framework_note(app, unread)
    if note:
        out.line(note)
    bindings = [
        [b["exchange"], "->", b["queue"], b["routing_key"] or ", ".join(f"{k}={v}" for k, v in b["arguments"].items())]
        for b in data["bindings"]
    ]
    out.table(["EXCHANGE", "", "QUEUE", "KEY"], bindings, title="bindings")
    out.table(["PIPELINE"], [[name] for name in data["pipelines"]], title="pipelines")
    partitions = sum(len(consumed) - 1 for consumed in declared.consume_queues.values())
    out.line(
        f"{len(declared.queues)} queues = 2 x {len(actors)} actors + {len(declared.delay_tiers_ms)} delay tiers "
        f"+ {partitions} more partitions of ordered actors"
    )
    return 0


def queues(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.broker import ExchangeBroker
    from pipelines.cli.readers import framework_note, unread

    broker = app.broker
    if not isinstance(broker, ExchangeBroker):
        if args.json:
            out.json([])
        else:
            out.line("the embedded broker keeps no queues between processes")
        return 0
    found: list[dict[str, Any]] = []
    for queue in broker.topology.queues:
        count = broker.queue_depth(queue.name)
        no_consumer = count is not None and unread(broker, queue)
        found.append({"name": queue.name, "role": queue.role, "messages": count, "no_consumer": no_consumer})
    if args.json:
        out.json(found)
        return 0
    rows: list[list[str | Text]] = []
    for q in found:
        messages = "missing" if q["messages"] is None else str(q["messages"])
        rows.append([q["name"], q["role"], messages, Text("no consumer" if q["no_consumer"] else "", "yellow")])
    out.table(["QUEUE", "ROLE", "MESSAGES", "NOTE"], rows)
    note = framework_note(app, {q["name"] for q in found if q["no_consumer"]})
    if note:
        out.line(note)
    return 0


def workers(app: App, args: argparse.Namespace, out: Output) -> int:
    import time
    from dataclasses import asdict

    from pipelines.console.data import worker_views

    shown = worker_views(app.store.worker_beats(), app.settings.worker.heartbeat_s, time.time())
    if args.json:
        out.json([asdict(view) for view in shown])
        return 0
    if not shown:
        out.line("no worker process has recorded a heartbeat in the last hour")
        return 0
    rows: list[list[str | Text]] = [
        [
            Text("alive", "green") if w.alive else Text("gone", "dim"),
            w.beat.host,
            str(w.beat.pid),
            f"{w.processes}x{w.beat.threads}",
            ", ".join(w.beat.queues),
            str(w.beat.processed),
            Text(str(w.beat.failed), "red" if w.beat.failed else ""),
            "\n".join(w.beat.running) or "-",
            f"{seconds(w.seen_s_ago)} ago",
        ]
        for w in shown
    ]
    headers = [
        "STATE",
        "HOST",
        "PID",
        "PROCESSES x THREADS",
        "QUEUES",
        "PROCESSED",
        "FAILED",
        "RUNNING NOW",
        "LAST BEAT",
    ]
    out.table(headers, rows)
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
    "topology": topology,
    "queues": queues,
    "workers": workers,
    "ui": ui,
}


def print_config(masked: dict[str, Any]) -> None:
    """The effective configuration (secrets masked), as JSON: it is nested, and JSON reads as it is."""
    sys.stdout.write(json.dumps(masked, indent=2) + "\n")
