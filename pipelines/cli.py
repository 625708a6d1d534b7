"""The ``pipelines`` command: start and follow runs, publish events, inspect queues and topology.

Every command reads ``config.toml`` (or ``--config``/``$PIPELINES_CONFIG``) and the ``PIPELINES_*``
variables. Errors are one line on stderr and a non-zero exit status: 2 when the command as given can
never work (usage, configuration, an unknown name, input that does not validate), 1 when it could not
be done this time (a service, a failed run, a run or dead letter that is not there).

The framework is imported once the command is known, so ``--help`` and usage errors answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.app import App
    from pipelines.store.base import RunStatus

#: Steps listed one per line by `status`; longer runs are summarised by state.
MAX_LISTED_STEPS = 40
#: What `pipelines demo` says: the demo is example code, kept with the example actors.
DEMO_ELSEWHERE = (
    "The demo ships with the repository, not with the package: run `make demo` in a checkout "
    "(it runs `python -m actors.demo`)."
)


class _UsageError(Exception):
    """A command given in a way that cannot work, found past argparse (one line, exit status 2)."""


def _seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _parse_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (KEY a Python identifier)")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipelines",
        description="Run and inspect rabbit-pipelines pipelines on RabbitMQ (or the embedded broker).",
    )
    parser.add_argument("--config", metavar="PATH", help="config file (default: $PIPELINES_CONFIG or ./config.toml)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="start a registered pipeline", description="Start a registered pipeline.")
    run.add_argument("name", help="the registered pipeline's name (see `pipelines topology`)")
    run.add_argument(
        "--arg",
        dest="args",
        action="append",
        type=_parse_arg,
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of the run; VALUE is JSON when it parses as JSON (repeatable)",
    )
    run.add_argument("--idempotency-key", help="a second start with the same key returns the first run")
    run.add_argument("--wait", action="store_true", help="wait for the run to end, showing progress")
    run.add_argument(
        "--timeout", type=_seconds, default=None, metavar="SECONDS", help="wait (as --wait) for at most this long"
    )

    status = commands.add_parser("status", help="show a run and its steps", description="Show a run and its steps.")
    status.add_argument("run_id")
    status.add_argument("--json", action="store_true", help="print the status as JSON")

    cancel = commands.add_parser(
        "cancel", help="cancel a run", description="Cancel a run; steps not started never run."
    )
    cancel.add_argument("run_id")

    publish = commands.add_parser(
        "publish", help="publish a domain event", description="Publish an event to every subscribed actor."
    )
    publish.add_argument("topic", help="dot-separated words, such as order.placed")
    publish.add_argument("payload", help="the event's JSON payload")

    dlq = commands.add_parser(
        "dlq", help="list, show, replay and purge dead letters", description="Inspect and replay dead letters."
    )
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dlq_list = dlq_commands.add_parser("list", help="list dead letters with their reasons")
    dlq_list.add_argument("--queue", help="only this actor, actor queue or dead-letter queue")
    dlq_list.add_argument("--limit", type=int, default=100, help="at most this many per queue (default 100)")
    dlq_list.add_argument("--json", action="store_true", help="print JSON")
    dlq_show = dlq_commands.add_parser("show", help="show one dead letter, its reason and its message")
    dlq_show.add_argument("id", help="the dead letter's id (its message id)")
    dlq_replay = dlq_commands.add_parser(
        "replay", help="send dead letters back to their actor (inside their run, for pipeline steps)"
    )
    which = dlq_replay.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="the dead letter's id")
    which.add_argument("--all", action="store_true", help="every dead letter (of --queue)")
    dlq_replay.add_argument("--queue", help="only this actor, actor queue or dead-letter queue")
    dlq_purge = dlq_commands.add_parser("purge", help="delete dead letters for good")
    dlq_purge.add_argument("--queue", help="only this actor, actor queue or dead-letter queue")
    dlq_purge.add_argument("--yes", action="store_true", help="required: purging cannot be undone")

    top = commands.add_parser("top", help="a live view of queues, rates, errors and recent runs")
    top.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS", help="refresh period (default 2)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")

    ui = commands.add_parser(
        "ui",
        help="serve the web console: runs, dead letters, queues and workers (pip install 'rabbit-pipelines[ui]')",
        description="Serve the web console and its JSON API (/api/); actions need [ui] token.",
    )
    ui.add_argument("--host", help="address to listen on (default [ui] host, 127.0.0.1: this machine only)")
    ui.add_argument("--port", type=int, help="port to listen on (default [ui] port, 8181)")

    keda = commands.add_parser("keda", help="print a KEDA ScaledObject watching the queues of a worker Deployment")
    keda.add_argument("--deployment", required=True, help="the worker Deployment to scale")
    keda.add_argument("--queues", nargs="+", default=[], metavar="QUEUE", help="its `dramatiq --queues` (default all)")
    for flag, default, text in (("--value", 500, "messages waiting per replica"), ("--min", 1, "fewest replicas")):
        keda.add_argument(flag, type=int, default=default, help=f"{text} (default {default})")
    keda.add_argument("--max", type=int, default=10, help="most replicas (default 10)")
    keda.add_argument("--auth", default="rabbit-pipelines-amqp", help="the TriggerAuthentication with the AMQP URL")
    commands.add_parser("topology", help="show actors and their profiles, exchanges, queues, bindings, pipelines")
    commands.add_parser("queues", help="show the depth of every queue, dead-letter queues included")
    commands.add_parser("config", help="print the effective configuration, secrets masked")
    commands.add_parser("demo", help="where the demo is (it ships with the repository: `make demo`)")
    commands.add_parser(
        "scheduler",
        help="send scheduled actors' ticks, through RabbitMQ outages (periodiq's arguments: BROKER [MODULE ...])",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "scheduler":
        # periodiq's arguments, as given: the scheduler imports the broker module like `periodiq` does,
        # and that module configures the app (from --config too).
        if args.config:
            os.environ["PIPELINES_CONFIG"] = args.config
        from pipelines.scheduler import main as scheduler_main

        return scheduler_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return _command(args)


def _command(args: argparse.Namespace) -> int:
    if args.command == "demo":
        # The demo runs the example actors, which ship with the repository, not with the package.
        print(f"pipelines: {DEMO_ELSEWHERE}", file=sys.stderr)
        return 2
    # Like `dramatiq`: the user's modules (app.actors) are found in the directory the command runs in.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from pipelines.errors import ConfigError, DefinitionError, PipelinesError

    try:
        from pipelines.app import configure
        from pipelines.config import load_settings

        settings = load_settings(args.config)
        if args.command == "config":
            print(json.dumps(settings.masked(), indent=2))
            return 0
        app = configure(settings)
        app.load_modules()
        return _COMMANDS[args.command](app, args)
    except (ConfigError, DefinitionError, _UsageError) as e:
        print(f"pipelines: {e}", file=sys.stderr)
        return 2
    except PipelinesError as e:
        print(f"pipelines: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run(app: App, args: argparse.Namespace) -> int:
    from pipelines.errors import RunTimeout

    run = app.run(args.name, idempotency_key=args.idempotency_key, **dict(args.args))
    print(run.id if run.created else f"{run.id} (already started with this idempotency key)")
    if not (args.wait or args.timeout):
        return 0
    progress = _Progress()
    try:
        status = run.wait(args.timeout, on_change=progress.show)
    except RunTimeout as e:
        progress.clear()
        print(f"pipelines: {e}", file=sys.stderr)
        return 1
    progress.clear()
    _print_status(status)
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


def _status(app: App, args: argparse.Namespace) -> int:
    import orjson

    status = app.get_run(args.run_id).status()
    if args.json:
        print(orjson.dumps(status, option=orjson.OPT_INDENT_2).decode())
    else:
        _print_status(status)
    return 0


def format_status(status: RunStatus) -> str:
    """A run's status for people: header, steps (or counts by state for long runs), result or error."""
    duration = f"{status.duration_s:.3f} s" if status.duration_s is not None else "-"
    lines = [f"run {status.run_id}  {status.pipeline}  {status.state}  {duration}"]
    if len(status.steps) <= MAX_LISTED_STEPS:
        for step in status.steps:
            took = (
                f"{(step.finished_at_ms - step.started_at_ms) / 1000:.3f} s"
                if step.started_at_ms and step.finished_at_ms
                else ""
            )
            attempts = f"  attempts={step.attempts}" if step.attempts > 1 else ""
            error = f"  {step.error}" if step.error else ""
            progress = ""
            if step.progress is not None and step.state in ("running", "retrying"):
                progress = f"  {step.progress:.0%} {step.progress_text or ''}".rstrip()
            lines.append(f"  {step.node:<10} {step.actor:<28} {step.state:<10} {took:>9}{attempts}{progress}{error}")
    else:
        counts = {
            state: status.count(state) for state in ("succeeded", "running", "retrying", "pending", "failed", "skipped")
        }
        summary = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        lines.append(f"  {len(status.steps)} steps: {summary}")
    if status.state == "succeeded":
        lines.append(f"  result: {status.result_json}")
    elif status.error:
        lines.append(f"  error at step {status.failed_step}: {status.error}")
    return "\n".join(lines)


def _print_status(status: RunStatus) -> None:
    print(format_status(status))


def _cancel(app: App, args: argparse.Namespace) -> int:
    run = app.get_run(args.run_id)
    if run.cancel():
        print(f"{run.id} cancelled")
        return 0
    print(f"{run.id} had already ended ({run.status().state}); nothing to cancel")
    return 1


def _publish(app: App, args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as e:
        raise _UsageError(f"The payload is not JSON ({e}). Quote it: '{{\"order_id\": 1}}'.") from None
    print(app.publish(args.topic, payload))
    return 0


def _topology(app: App, args: argparse.Namespace) -> int:
    from pipelines.profiles import profile_of, summary

    topology = app.broker.topology
    print(f"namespace {topology.namespace} on {app.settings.broker.masked_url}")
    print("exchanges:")
    for exchange in topology.exchanges:
        print(f"  {exchange.name:<40} {exchange.type}")
    print("actors:")
    for actor_name in sorted(topology.actor_queues):
        actor = app.broker.get_actor(actor_name)
        queues = topology.consume_queues[actor_name]
        where = (
            queues[0] if len(queues) == 1 else f"{len(queues)} partitions {queues[0]}..{queues[-1].rsplit('.', 1)[1]}"
        )
        print(f"  {actor_name:<28} {profile_of(actor):<16} {actor.queue_name:<14} {where}")
        print(f"  {'':<28} {summary(actor)}")
    print("queues:")
    for queue in topology.queues:
        kind = queue.arguments.get("x-queue-type", "")
        print(f"  {queue.name:<48} {queue.role:<12} {kind}")
    print("bindings:")
    for binding in topology.bindings:
        key = binding.routing_key or ", ".join(f"{k}={v}" for k, v in binding.arguments.items())
        print(f"  {binding.exchange:<24} -> {binding.queue:<48} {key}")
    print("pipelines:")
    for name in sorted(app.pipelines):
        print(f"  {name}")
    return 0


def _queues(app: App, args: argparse.Namespace) -> int:
    from pipelines.broker import ExchangeBroker

    broker = app.broker
    if not isinstance(broker, ExchangeBroker):
        print("the embedded broker keeps no queues between processes")
        return 0
    for queue in broker.topology.queues:
        count = broker.queue_depth(queue.name)
        # An actor queue nobody reads: its messages wait (no worker, or workers for other --queues).
        unread = queue.role == "actor" and count is not None and broker.queue_consumers(queue.name) == 0
        note = "  no consumer" if unread else ""
        print(f"  {queue.name:<48} {queue.role:<12} {'missing' if count is None else count:>8}{note}")
    return 0


def _dlq(app: App, args: argparse.Namespace) -> int:
    from pipelines.dlq import describe

    letters = app.dead_letters
    if args.dlq_command == "list":
        found = describe(letters.list(args.queue, limit=args.limit))
        if args.json:
            print(json.dumps(found, indent=2))
        for entry in [] if args.json else found:
            where = f"run {entry['run_id']} step {entry.get('step')}" if entry.get("run_id") else entry.get("actor", "")
            error = f"{entry.get('error_type', '')}: {entry.get('error', '')}" if entry.get("error_type") else ""
            print(f"{entry['id']}  {entry['dead_letter_queue']}  {entry['reason']}  {where}  {error}".rstrip())
        if not args.json:
            print(f"{len(found)} dead letter(s)")
        return 0
    if args.dlq_command == "show":
        letter = letters.show(args.id)
        shown = describe([letter])[0]
        shown["message"] = letter.message.asdict() if letter.message else letter.body.decode(errors="replace")
        print(json.dumps(shown, indent=2, default=str))
        return 0
    if args.dlq_command == "replay":
        if args.all:
            outcomes = letters.replay_all(args.queue)
            for letter_id, outcome in outcomes.items():
                print(f"{letter_id}  {outcome}")
            return 1 if any(o.startswith("not replayed") for o in outcomes.values()) else 0
        print(f"{args.id}  {letters.replay(args.id, queue=args.queue)}")
        return 0
    if not args.yes:
        raise _UsageError("Purging deletes dead letters for good; add --yes to confirm.")
    print(f"purged {letters.purge(args.queue)} dead letter(s)")
    return 0


def _keda(app: App, args: argparse.Namespace) -> int:
    from pipelines.keda import print_scaled_object

    return print_scaled_object(app, args)


def _top(app: App, args: argparse.Namespace) -> int:
    from pipelines.top import run_top

    return run_top(app, interval_s=args.interval, once=args.once)


def _ui(app: App, args: argparse.Namespace) -> int:
    try:
        from pipelines.console.server import serve
    except ImportError as e:
        raise _UsageError(
            f"The web console needs the ui extra ({e.name} is not installed): pip install 'rabbit-pipelines[ui]'."
        ) from None
    return serve(app, host=args.host or app.settings.ui.host, port=args.port or app.settings.ui.port)


_COMMANDS = {
    "dlq": _dlq,
    "keda": _keda,
    "top": _top,
    "run": _run,
    "status": _status,
    "cancel": _cancel,
    "publish": _publish,
    "topology": _topology,
    "queues": _queues,
    "ui": _ui,
}


if __name__ == "__main__":
    sys.exit(main())
