"""`pipelines top`: a live terminal view of queues, rates, errors and recent runs, for people without Grafana.

Queue depths come from RabbitMQ, recent runs from the run store, and rates from the worker's metrics
port when ``[metrics] enabled`` (differences between two refreshes). Names are shown as written, never
read as markup.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import TextIO

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pipelines.app import App
from pipelines.cli.output import safe_text, state_text
from pipelines.observability.metrics_dir import NAMESPACE_LABEL

#: Recent runs shown.
RECENT_RUNS = 10
#: Characters per line when the view is not on a terminal (long queue names are not cut).
PLAIN_WIDTH = 200
#: Seconds to wait for the metrics port before showing the view without rates.
SCRAPE_TIMEOUT_S = 2.0

Counts = dict[str, dict[str, float]]
"""metric name → actor → value."""


def scrape_counts(app: App) -> Counts | None:
    """Per-actor processed and failed totals from the worker's metrics port (None when unavailable).

    Only this app's series count: a port shared or reused by another namespace's worker adds nothing.
    """
    if not app.settings.metrics.enabled:
        return None
    host = app.settings.metrics.host.replace("0.0.0.0", "127.0.0.1")
    try:
        with urllib.request.urlopen(
            f"http://{host}:{app.settings.metrics.port}/metrics", timeout=SCRAPE_TIMEOUT_S
        ) as r:
            text = r.read().decode()
    except OSError:
        return None
    counts: Counts = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get(NAMESPACE_LABEL) != app.settings.namespace:
                continue
            if sample.name in ("pipelines_messages_processed_total", "pipelines_messages_failed_total"):
                actor = sample.labels.get("actor", "?")
                counts.setdefault(sample.name, {})[actor] = counts.get(sample.name, {}).get(actor, 0) + sample.value
    return counts


def _rates(actor: str, previous: Counts | None, current: Counts | None, elapsed_s: float) -> tuple[str, str]:
    if previous is None or current is None or elapsed_s <= 0:
        return "-", "-"

    def per_s(name: str) -> str:
        return f"{(current.get(name, {}).get(actor, 0) - previous.get(name, {}).get(actor, 0)) / elapsed_s:.1f}"

    return per_s("pipelines_messages_processed_total"), per_s("pipelines_messages_failed_total")


def render(app: App, previous: Counts | None, current: Counts | None, elapsed_s: float) -> Group:
    """One frame of the view: the queues (an ordered actor's partitions under it), then the recent runs."""
    depth: Callable[[str], int | None] | None = getattr(app.broker, "queue_depth", None)

    def shown(queue: str) -> str:
        found = depth(queue) if depth else None
        return "-" if found is None else str(found)

    queues = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (("queue", "left"), ("ready", "right"), ("dead", "right"), ("msg/s", "right")):
        queues.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    queues.add_column("err/s", justify="right", no_wrap=True)
    topology = app.broker.topology
    for actor, queue in sorted(topology.actor_queues.items(), key=lambda item: item[1]):
        rate, error = _rates(actor, previous, current, elapsed_s)
        queues.add_row(safe_text(queue), shown(queue), shown(f"{queue}.dead"), rate, error)
        partitions = [q for q in topology.consume_queues.get(actor, ()) if q != queue]
        for partition in partitions:  # an ordered actor: one queue per partition, each in order
            queues.add_row(safe_text(f"  {partition.removeprefix(queue)}"), shown(partition), "", "", "")
    runs = Table(box=None, pad_edge=False, header_style="bold")
    runs.add_column("recent run", no_wrap=True)
    runs.add_column("pipeline", no_wrap=True, max_width=24)
    runs.add_column("state", no_wrap=True)
    runs.add_column("steps", justify="right", no_wrap=True)
    runs.add_column("seconds", justify="right", no_wrap=True)
    for run_id in app.store.recent_runs(RECENT_RUNS):
        status = app.store.get_run(run_id)
        if status is not None:
            steps = f"{status.count('succeeded')}/{len(status.steps)}"
            state = state_text(status.state)
            # A pipeline's name is data (a caller's ``name=``): shown as written, never read as markup.
            runs.add_row(run_id, safe_text(status.pipeline), state, steps, f"{status.duration_s or 0:.2f}")
    title = Text(f"rabbit-pipelines  namespace {app.settings.namespace}  {time.strftime('%H:%M:%S')}", style="bold")
    parts: list[Text | Table] = [title, Text(""), queues, Text(""), runs]
    if current is None:
        parts += [Text(""), Text("(rates need [metrics] enabled and a worker serving them)")]
    return Group(*parts)


def run_top(app: App, *, interval_s: float, once: bool, out: TextIO = sys.stdout) -> int:
    """Refresh the view every ``interval_s`` until interrupted (one frame with ``once``).

    Rates are differences between two samples ``interval_s`` apart, so ``once`` waits that long (when
    there are rates to show). On a terminal the frame is redrawn in place by rich's ``Live``: each
    refresh moves the cursor back up over the last frame, erasing its lines, and writes the whole new
    frame, in one write (the view does not scroll). Each frame is laid out for the window's size at that
    moment, so the view follows a resize. Elsewhere (a pipe, a file) each frame is printed as plain text
    after the one before, as soon as it is drawn.
    """
    terminal = out.isatty()
    console = Console(file=out, width=None if terminal else PLAIN_WIDTH, highlight=False)
    previous, at = scrape_counts(app), time.monotonic()
    if once:
        if previous is not None:
            time.sleep(interval_s)
        console.print(render(app, previous, scrape_counts(app), time.monotonic() - at))
        return 0
    frames = _frames(app, interval_s, previous, at)
    if not terminal:
        for frame in frames:
            console.print(frame)
            out.flush()
    with Live(next(frames), console=console, auto_refresh=False, screen=False) as live:
        for frame in frames:
            live.update(frame, refresh=True)
    return 0


def _frames(app: App, interval_s: float, previous: Counts | None, at: float) -> Iterator[Group]:
    """The first frame at once (without rates), then one every ``interval_s``, forever."""
    yield render(app, None, None, 0)
    while True:
        time.sleep(interval_s)
        current, now = scrape_counts(app), time.monotonic()
        yield render(app, previous, current, now - at)
        previous, at = current, now
