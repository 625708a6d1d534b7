"""Unacknowledged deliveries per queue, from the workers' heartbeats: the console's queues page, ``/api/queues``
and `pipelines queues` show what a worker holds (prefetched, running) and 0 once it acknowledged them.
A worker on the real RabbitMQ and Redis whose actor waits for an event; the real `pipelines` command."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import httpx

from pipelines.app import build_app
from pipelines.testing import running_worker
from tests.console.conftest import console_settings, served_console
from tests.support.ports import free_port
from tests.test_cli import TIMEOUT_S, environment, pipelines

#: The CLI's actors module: the same actor, so that `pipelines queues` lists its queue (PYTHONPATH names it).
HELD_ACTORS = """
import dramatiq
from pipelines.app import configure

app = configure()
dramatiq.actor(actor_name="held", broker=app.broker)(lambda n: None)
"""

PREFETCH = 3
SENT = 5


def held_row(overview: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(q for q in overview["queues"] if q["actor"] == "held")
    return found


def cli_row(env: dict[str, str]) -> dict[str, Any]:
    """The held actor's queue as `pipelines queues --json` prints it."""
    shown = pipelines(env, "queues", "--json")
    assert shown.returncode == 0, shown.stderr
    found: dict[str, Any] = next(q for q in json.loads(shown.stdout) if q.get("actor") == "held")
    return found


def test_the_deliveries_a_worker_holds_unacknowledged_are_shown_per_queue_and_none_once_acknowledged(
    delete_namespace: Callable[[str], None], tmp_path: Path
) -> None:
    settings = console_settings(free_port())
    settings = settings.model_copy(
        update={
            "broker": settings.broker.model_copy(update={"prefetch": PREFETCH, "delay_tiers_s": [1.0]}),
            "metrics": settings.metrics.model_copy(update={"enabled": False}),
            "worker": settings.worker.model_copy(update={"heartbeat_s": 0.2}),
            "ui": settings.ui.model_copy(update={"metrics_urls": []}),
            "telemetry": settings.telemetry.model_copy(update={"enabled": False}),
        }
    )
    app = build_app(settings)
    release = threading.Event()

    @dramatiq.actor(actor_name="held", broker=app.broker)
    def held(n: int) -> None:
        release.wait(TIMEOUT_S)

    (tmp_path / "held_actors.py").write_text(HELD_ACTORS)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    env = environment(
        settings.namespace,
        PIPELINES_APP__ACTORS="held_actors",
        PYTHONPATH=path,
        PIPELINES_WORKER__HEARTBEAT_S="0.2",
        PIPELINES_BROKER__DELAY_TIERS_S="[1.0]",
    )
    try:
        with running_worker(app, threads=1), served_console(app) as url, httpx.Client(base_url=url) as client:
            for n in range(SENT):
                held.send(n)
            # One running, the others prefetched: the worker holds PREFETCH, RabbitMQ keeps the rest ready.
            deadline = time.monotonic() + TIMEOUT_S
            while (row := held_row(client.get("/api/queues").json()))["unacked"] != PREFETCH:
                assert time.monotonic() < deadline, row
                time.sleep(0.1)  # the count comes with the worker's next heartbeat: nothing to subscribe to
            page = client.get("/queues").text
            holding = cli_row(env)
            text = pipelines(env, "queues")
            release.set()
            while (after := held_row(client.get("/api/queues").json()))["unacked"] != 0 or after["depth"] != 0:
                assert time.monotonic() < deadline, after
                time.sleep(0.1)
            while (settled := cli_row(env))["unacked"] != 0:
                assert time.monotonic() < deadline, settled
                time.sleep(0.1)
            page_after = client.get("/queues").text
    finally:
        app.close()
        delete_namespace(settings.namespace)

    assert (row["depth"], row["consumers"], row["unacked"]) == (SENT - PREFETCH, 1, PREFETCH)
    assert _unacked_cell(page, row["queue"]) == str(PREFETCH)
    assert (holding["messages"], holding["consumers"], holding["unacked"]) == (SENT - PREFETCH, 1, PREFETCH)
    assert text.returncode == 0, text.stderr
    assert re.search(r"QUEUE\s+ROLE\s+MESSAGES\s+CONSUMERS\s+UNACKED", text.stdout)
    assert re.search(rf"{re.escape(row['queue'])}\s+actor\s+{SENT - PREFETCH}\s+1\s+{PREFETCH}\b", text.stdout)
    assert (after["unacked"], settled["unacked"], settled["consumers"]) == (0, 0, 1)
    assert _unacked_cell(page_after, row["queue"]) == "0"


def _unacked_cell(page: str, queue: str) -> str:
    """The Unacked cell of ``queue``'s row of the queues page."""
    row = page.split(f'data-queue="{queue}"', 1)[1].split("</tr>", 1)[0]
    found = re.search(r'data-count="unacked">([^<]*)<', row)
    assert found is not None, row
    return found.group(1)
