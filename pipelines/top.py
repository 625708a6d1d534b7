"""`pipelines top`: a live terminal view of queues, rates, errors and recent runs, for people without Grafana.

Queue depths come from RabbitMQ, recent runs from the run store, and rates from the worker's metrics
port when ``[metrics] enabled`` (differences between two refreshes).
"""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Callable
from typing import TextIO

from prometheus_client.parser import text_string_to_metric_families

from pipelines.app import App
from pipelines.metrics_dir import NAMESPACE_LABEL

#: Recent runs shown.
RECENT_RUNS = 10
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


def render(app: App, previous: Counts | None, current: Counts | None, elapsed_s: float) -> str:
    """One frame of the view."""
    lines = [f"rabbit-pipelines  namespace {app.settings.namespace}  {time.strftime('%H:%M:%S')}", ""]
    depth: Callable[[str], int | None] | None = getattr(app.broker, "queue_depth", None)
    lines.append(f"{'queue':<48} {'ready':>8} {'dead':>6} {'msg/s':>8} {'err/s':>7}")
    topology = app.broker.topology
    for actor, queue in sorted(topology.actor_queues.items(), key=lambda item: item[1]):
        ready = depth(queue) if depth else None
        dead = depth(f"{queue}.dead") if depth else None
        rate = error = "-"
        if previous is not None and current is not None and elapsed_s > 0:
            done = current.get("pipelines_messages_processed_total", {})
            failed = current.get("pipelines_messages_failed_total", {})
            before_done = previous.get("pipelines_messages_processed_total", {})
            before_failed = previous.get("pipelines_messages_failed_total", {})
            rate = f"{(done.get(actor, 0) - before_done.get(actor, 0)) / elapsed_s:.1f}"
            error = f"{(failed.get(actor, 0) - before_failed.get(actor, 0)) / elapsed_s:.1f}"
        lines.append(
            f"{queue:<48} {'-' if ready is None else ready:>8} {'-' if dead is None else dead:>6} {rate:>8} {error:>7}"
        )
    lines += ["", f"{'recent run':<34} {'pipeline':<20} {'state':<10} {'steps':>11} {'seconds':>8}"]
    for run_id in app.store.recent_runs(RECENT_RUNS):
        status = app.store.get_run(run_id)
        if status is None:
            continue
        steps = f"{status.count('succeeded')}/{len(status.steps)}"
        lines.append(
            f"{run_id:<34} {status.pipeline[:20]:<20} {status.state:<10} {steps:>11} {status.duration_s or 0:>8.2f}"
        )
    if current is None:
        lines += ["", "(rates need [metrics] enabled and a worker serving them)"]
    return "\n".join(lines)


def run_top(app: App, *, interval_s: float, once: bool, out: TextIO = sys.stdout) -> int:
    """Refresh the view every ``interval_s`` until interrupted (one frame with ``once``)."""
    previous, at = scrape_counts(app), time.monotonic()
    while True:
        if not once:
            time.sleep(interval_s)
        current, now = scrape_counts(app), time.monotonic()
        frame = render(app, previous, current, now - at)
        out.write(frame + "\n" if once else "\x1b[2J\x1b[H" + frame + "\n")
        out.flush()
        if once:
            return 0
        previous, at = current, now
