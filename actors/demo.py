"""The example pipelines end to end (`make demo` runs ``python -m actors.demo``).

It runs on RabbitMQ and Redis when they answer. When either does not, the demo says so in one line
and starts again on the embedded broker and store, so a fresh checkout shows the product without any
service. It starts again (a new interpreter in the same process) because importing ``actors``
declared the actors on the configured broker before the demo could look at the services.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from actors import app as configured_app
from pipelines.app import App
from pipelines.cli.status import format_status
from pipelines.config.masking import mask_url
from pipelines.config.settings import Settings
from pipelines.runs import Run
from pipelines.testing import running_worker

#: Seconds to wait for a service's port before falling back to the embedded mode.
CONNECT_TIMEOUT_S = 1.0
#: Seconds each demo run may take before the demo reports it and moves on.
RUN_TIMEOUT_S = 120.0
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671, "redis": 6379, "rediss": 6379}
#: What the demo sets when it starts again on the embedded broker and store.
EMBEDDED_ENV = {"PIPELINES_BROKER__URL": "memory://", "PIPELINES_STORE__URL": "memory://"}


def unreachable(settings: Settings) -> str | None:
    """Why the configured services cannot be used (None when both answer; RabbitMQ: any of its nodes)."""
    for what, urls in (("RabbitMQ", settings.broker.node_urls), ("Redis", (settings.store.url,))):
        reasons = [reason for url in urls if (reason := _unanswered(what, url))]
        if len(reasons) == len(urls):
            return reasons[0]
    return None


def _unanswered(what: str, url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return None
    port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        return f"{what} at {mask_url(url)} does not answer ({e.strerror or e})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actors.demo", description="Run the example pipelines.")
    parser.add_argument(
        "--embedded", action="store_true", help="use the in-memory broker and store even if services answer"
    )
    args = parser.parse_args(argv)
    settings = configured_app.settings
    embedded = settings.broker.url == settings.store.url == "memory://"
    if not embedded:
        reason = "--embedded given" if args.embedded else unreachable(settings)
        if reason:
            print(f"{reason}: running on the embedded broker and store.", flush=True)
            command = [sys.executable, "-m", "actors.demo", "--embedded"]
            os.execve(sys.executable, command, os.environ | EMBEDDED_ENV)
        print(f"Using RabbitMQ at {settings.broker.masked_url} and Redis at {mask_url(settings.store.url)}.")
    elif not args.embedded:
        print("Running on the embedded broker and store (memory:// in the configuration).")
    return run_demo(configured_app)


def run_demo(app: App) -> int:
    """Run every example pipeline and print each run's steps, result and duration; 0 if all succeed."""
    failures = 0
    with running_worker(app, threads=8):
        for title, start in _scenarios(app):
            print(f"\n== {title}")
            began = time.perf_counter()
            status = start().wait(RUN_TIMEOUT_S)
            print(format_status(status, app.store.run_continuations(status.run_id)))
            print(f"  (submitted to finished: {time.perf_counter() - began:.3f} s)")
            failures += status.state != "succeeded"
    print(f"\n{'All demo runs succeeded.' if not failures else f'{failures} demo run(s) did not succeed.'}")
    app.close()
    return 1 if failures else 0


def _scenarios(app: App) -> list[tuple[str, Callable[[], Run]]]:
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S%f")
    order = {"order_id": int(stamp[-9:]), "total": 59.9}
    day = datetime.date.today().isoformat()

    def from_event() -> Run:
        # The subscriber starts the run with the order's idempotency key; starting it here with the
        # same key returns that one run, whichever of the two comes first.
        app.publish("order.placed", order)
        return app.run("order_fulfilment", idempotency_key=f"order-{order['order_id']}", **order)

    return [
        (
            "order_fulfilment: charge, then a fan-out (one publish) to inventory, shipping and e-mail",
            lambda: app.run("order_fulfilment", order_id=order["order_id"] + 1, total=120.0),
        ),
        ("order.placed event: a subscriber starts the same pipeline, exactly once per order", from_event),
        (
            "thumbnails: fetch once, render three sizes in parallel, publish the gallery",
            lambda: app.run("thumbnails", url=f"https://example.com/photos/{stamp}.jpg"),
        ),
        (
            "shard_report: a chord over 8 data shards, then the report",
            lambda: app.run("shard_report", day=day, shards=8),
        ),
        (
            "notify_users: 2,000 notifications in parallel, then one summary",
            lambda: app.run("notify_users", campaign=f"winter-sale-{stamp}", users=2000),
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
