"""The ``pipelines`` command: start and follow runs, publish events, inspect queues and topology.

Every command reads ``config.toml`` (or ``--config``/``$PIPELINES_CONFIG``) and the ``PIPELINES_*``
variables, and imports the user's app module from the working directory (``[app] actors``, or
``--app``), refusing to guess one when nothing names it. Errors are one line on stderr and a non-zero
exit status: 2 when the command as given can never work (usage, configuration, an unknown name, input
that does not validate), 1 when it could not be done this time (a service, a failed run, a run or dead
letter that is not there).

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
    from pipelines.cli.status import format_status
    from pipelines.config.settings import Settings

__all__ = ["build_parser", "format_status", "main"]
#: What `pipelines demo` says: the demo is example code, kept with the example actors.
DEMO_ELSEWHERE = (
    "The demo ships with the repository, not with the package: run `make demo` in a checkout "
    "(it runs `python -m actors.demo`)."
)


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


def _add_store(commands: Any) -> None:
    store = commands.add_parser("store", help="the run store's own upkeep", description="The run store's upkeep.")
    store.add_subparsers(dest="store_command", required=True, metavar="ACTION").add_parser(
        "migrate", help="create or upgrade a PostgreSQL store's tables (its first use does it too, when it may)"
    )


def _add_runs(commands: Any) -> None:
    runs = commands.add_parser(
        "runs",
        help="find runs by state, pipeline, time or key, newest first",
        description="List the retained runs, newest first, a page at a time.",
    )
    runs.add_argument("--state", help="pending, running, succeeded, failed or cancelled")
    runs.add_argument("--pipeline", help="only runs of this pipeline")
    runs.add_argument("--since", metavar="TIME", help="started since: 15m, 2h, 7d, an ISO 8601 date or epoch ms")
    runs.add_argument("--key", help="the run this idempotency key started")
    runs.add_argument("--limit", type=_page_size, default=50, metavar="N", help="at most N runs (default 50)")
    runs.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    runs.add_argument("--json", action="store_true", help="print JSON: the runs and the next page's cursor")


def _add_run_actions(commands: Any) -> None:
    """What an operator does to one run: cancel it, or re-run it."""
    cancel = commands.add_parser(
        "cancel", help="cancel a run", description="Cancel a run; steps not started never run."
    )
    cancel.add_argument("run_id")

    rerun = commands.add_parser(
        "rerun",
        help="re-run an ended run with its input, as a new run (prints its id)",
        description="Start an ended run's registered pipeline again with the run's input; the new run links to it.",
    )
    rerun.add_argument("run_id")


def _add_app_options(parser: argparse.ArgumentParser) -> None:
    """What every command reads: the config file, and the module of the user's app."""
    parser.add_argument("--config", metavar="PATH", help="config file (default: $PIPELINES_CONFIG or ./config.toml)")
    parser.add_argument(
        "--app",
        metavar="MODULE",
        help="the module that declares your actors, imported from this directory like `dramatiq MODULE` "
        "(overrides [app] actors)",
    )


def _add_run_and_status(commands: Any) -> None:
    """``run`` (start a registered pipeline) and ``status`` (show one run)."""
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

    status = commands.add_parser(
        "status",
        help="show a run: its pipeline's shape with each step's state and history, and its trace id",
        description="Show a run as a tree (chain, fan-out, group, chord; big groups folded; a step's attempts and "
        "replays under it) and its outcome; with --logs, what each step logged.",
    )
    status.add_argument("run_id")
    status.add_argument("--json", action="store_true", help="print the status as JSON (the result as a value)")
    status.add_argument("--logs", action="store_true", help="also print what each step logged, attempt by attempt")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipelines",
        description="Run and inspect rabbit-pipelines pipelines on RabbitMQ (or the embedded broker).",
    )
    _add_app_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_run_and_status(commands)
    _add_runs(commands)

    _add_run_actions(commands)

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
    dlq_show.add_argument("--json", action="store_true", help="print JSON")
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

    _add_store(commands)
    for name, text in (
        ("topology", "show actors and their profiles, exchanges, queues, bindings, pipelines"),
        ("queues", "show the depth of every queue, dead-letter queues included"),
        ("workers", "show each worker process by its heartbeat: queues, threads, counts, what it runs now"),
        ("config", "print the effective configuration (JSON), secrets masked"),
    ):
        commands.add_parser(name, help=text).add_argument("--json", action="store_true", help="print JSON")
    commands.add_parser("demo", help="where the demo is (it ships with the repository: `make demo`)")
    commands.add_parser(
        "scheduler",
        help="send scheduled actors' ticks, through RabbitMQ outages (periodiq's arguments: BROKER [MODULE ...])",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop quietly. Point stdout at nothing, so the interpreter's
        # own flush at exit does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "scheduler":
        # periodiq's arguments, as given: the scheduler imports the broker module like `periodiq` does,
        # and that module configures the app (from --config too).
        if args.config:
            os.environ["PIPELINES_CONFIG"] = args.config
        if args.app:
            os.environ["PIPELINES_APP__ACTORS"] = args.app
        from pipelines.cli.scheduler import main as scheduler_main

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
    # Imported before the try: a failed import is its own error, not hidden by the except clauses below.
    from pipelines.app import configure
    from pipelines.cli.commands import COMMANDS, UsageError
    from pipelines.cli.output import Output
    from pipelines.config.masking import mask_text
    from pipelines.config.settings import load_settings
    from pipelines.errors import AmbiguousId, ConfigError, DefinitionError, InvalidQuery, PipelinesError

    try:
        settings = load_settings(args.config)
        if args.app:
            settings = settings.model_copy(update={"app": settings.app.model_copy(update={"actors": args.app})})
        if args.command in ("config", "store"):  # the settings and the store alone: no app to load
            return _upkeep(args, settings)
        _check_app_is_named(settings, args.config)
        app = configure(settings)
        app.load_modules()
        return COMMANDS[args.command](app, args, Output())
    except (AmbiguousId, ConfigError, DefinitionError, InvalidQuery, UsageError) as e:
        print(f"pipelines: {mask_text(str(e))}", file=sys.stderr)
        return 2
    except PipelinesError as e:
        print(f"pipelines: {mask_text(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _upkeep(args: argparse.Namespace, settings: Settings) -> int:
    """``config`` and ``store migrate``: commands that load no app; the exit status."""
    if args.command == "config":
        from pipelines.cli.commands import print_config

        print_config(settings.masked())
        return 0
    from pipelines.cli.store import migrate

    return migrate(settings)


def _check_app_is_named(settings: Settings, config: str | None) -> None:
    """Refuse to guess the user's app: when nothing names it and the default module is not here, say how.

    Raises:
        ConfigError: Neither the config file, ``PIPELINES_APP__ACTORS`` nor ``--app`` names the actors'
            module, and the default one (``actors``) is not importable from this directory.
    """
    import importlib.util

    from pipelines.config.settings import CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH
    from pipelines.errors import ConfigError

    if "actors" in settings.app.model_fields_set or importlib.util.find_spec(settings.app.actors) is not None:
        return
    file = config or os.environ.get(CONFIG_PATH_ENV) or str(DEFAULT_CONFIG_PATH)
    where = f"{file} sets no [app] actors" if os.path.exists(file) else f"there is no {file}"
    raise ConfigError(
        f"No app to load: {where}, PIPELINES_APP__ACTORS is not set and {os.getcwd()} has no module "
        f"{settings.app.actors!r}. Name the module that declares your actors: `pipelines --app shop ...`, "
        '[app] actors = "shop" in config.toml (or --config PATH), or PIPELINES_APP__ACTORS=shop.'
    )


def _page_size(text: str) -> int:
    """A page size: a whole number from 1 to 1000."""
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs from 1 to 1000")
    return int(text)


def __getattr__(name: str) -> Any:
    # `from pipelines.cli import format_status` keeps working without loading rich for `--help`.
    if name == "format_status":
        from pipelines.cli.status import format_status

        return format_status
    raise AttributeError(f"module 'pipelines.cli' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
