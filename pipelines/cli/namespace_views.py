"""What a namespace holds and who works on it: ``pipelines topology``, ``queues`` and ``workers``.

``topology`` prints what the namespace declares. ``queues`` prints every queue's depth from RabbitMQ
and, per actor, the messages the workers processed, failed and dead-lettered in the last hour, from the
counts they add to the run store with their heartbeats (``pipelines.store.counts``): plain messages
sent with ``actor.send()`` as well as pipeline steps. ``workers`` prints each worker process by its
heartbeat.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.text import Text

from pipelines.cli.output import Output, seconds

if TYPE_CHECKING:
    from pipelines.app import App
    from pipelines.store.counts import ActorCounts


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
    from pipelines.cli.readers import framework_note
    from pipelines.console.overview import unacked_per_queue
    from pipelines.store.counts import LAST_HOUR_MS, per_actor

    broker = app.broker
    if not isinstance(broker, ExchangeBroker):
        if args.json:
            out.json([])
        else:
            out.line("the embedded broker keeps no queues between processes")
        return 0
    declared = broker.topology
    now_ms = int(time.time() * 1000)
    hour = per_actor(app.store.message_counts(now_ms - LAST_HOUR_MS, now_ms))
    actor_of = {queue: actor for actor, queue in declared.actor_queues.items()}
    held = unacked_per_queue(app.store.worker_beats(), app.settings.worker.heartbeat_s, now_ms / 1000)
    found: list[dict[str, Any]] = []
    for queue in declared.queues:
        count = broker.queue_depth(queue.name)
        consumers = broker.queue_consumers(queue.name) if count is not None else None
        entry: dict[str, Any] = {
            "name": queue.name,
            "role": queue.role,
            "messages": count,
            "consumers": consumers,
            "unacked": held.get(queue.name, 0) if count is not None else None,
            "no_consumer": queue.role == "actor" and consumers == 0,
        }
        actor = actor_of.get(queue.name)
        if actor is not None:  # an actor's queue (the first of an ordered actor's partitions)
            entry |= {"actor": actor, "last_hour": _counts_json(hour.get(actor))}
        found.append(entry)
    if args.json:
        out.json(found)
        return 0
    rows: list[list[str | Text]] = []
    for q in found:
        counts = (
            ["missing", "", ""] if q["messages"] is None else [str(q[k]) for k in ("messages", "consumers", "unacked")]
        )
        rows.append([q["name"], q["role"], *counts, Text("no consumer" if q["no_consumer"] else "", "yellow")])
    out.table(["QUEUE", "ROLE", "MESSAGES", "CONSUMERS", "UNACKED", "NOTE"], rows)
    note = framework_note(app, {q["name"] for q in found if q["no_consumer"]})
    if note:
        out.line(note)
    _print_last_hour(out, sorted(declared.actor_queues), hour)
    return 0


def _counts_json(counts: ActorCounts | None) -> dict[str, Any]:
    from pipelines.store.counts import ActorCounts

    shown = counts or ActorCounts()
    return {**asdict(shown), "mean_s": shown.mean_s}


def _print_last_hour(out: Output, actors: list[str], hour: dict[str, ActorCounts]) -> None:
    """Each actor's messages in the last hour, and where its dead letters are."""
    rows: list[list[str | Text]] = []
    for actor in actors:
        counts = hour.get(actor)
        if counts is None:
            rows.append([actor, "0", "0", "0", "", ""])
            continue
        rows.append(
            [
                actor,
                str(counts.processed),
                Text(str(counts.failed), "red" if counts.failed else ""),
                Text(str(counts.dead_lettered), "red" if counts.dead_lettered else ""),
                seconds(counts.mean_s),
                seconds(counts.slowest_ms / 1000) if counts.processed else "",
            ]
        )
    out.table(["ACTOR", "PROCESSED", "FAILED", "DEAD-LETTERED", "MEAN", "SLOWEST"], rows, title="the last hour")
    if any(counts.dead_lettered for counts in hour.values()):
        out.line("an actor's dead letters, plain messages and pipeline steps alike: pipelines dlq list --queue ACTOR")


def workers(app: App, args: argparse.Namespace, out: Output) -> int:
    from pipelines.console.overview import worker_views

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
