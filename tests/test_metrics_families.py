"""Every metric family the observability guide's table lists is served by a fresh worker, at zero where nothing
happened yet (a dashboard or alert sees 0, not nothing). A stock `dramatiq actors` worker on the real
RabbitMQ and Redis, scraped as Prometheus does."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.ports import free_port
from tests.test_metrics_groups import metrics_env
from tests.test_observability_processes import ROOT, Worker, wait_for_scrape

#: Appears with a scheduled job's first run: a zero would read as a run in 1970 (the guide says so).
AFTER_FIRST_RUN = {"pipelines_schedule_last_run_timestamp_seconds"}


def documented_families() -> set[str]:
    """The metric names of the guide's metrics table, braces expanded (``a_{b,c}_total`` is two)."""
    text = (ROOT / "docs" / "guides" / "observability.md").read_text()
    table = text[text.index("| metric | what |") :].split("\n\n")[0]
    names: set[str] = set()
    for row in table.splitlines()[2:]:
        for written in re.findall(r"`([a-z_{},]+)`", row.split("|")[1]):
            name = re.sub(r"\{[a-z_,]+\}$", "", written)  # without its labels
            parts = [part.split(",") for part in re.split(r"\{([a-z_,]+)\}", name)]
            names |= {"".join(choice) for choice in itertools.product(*parts)}
    return names


def missing(families: set[str], scraped: dict[str, Any]) -> set[str]:
    return {f for f in families if not {f, f"{f}_bucket", f"{f}_total"} & set(scraped)}


def test_a_fresh_worker_serves_every_family_of_the_documented_table(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    families = documented_families() - AFTER_FIRST_RUN
    env = metrics_env(namespaces(), free_port(), tmp_path / "samples")
    worker = Worker(env, tmp_path / "worker.log")
    try:
        scraped = wait_for_scrape(int(env["PIPELINES_METRICS__PORT"]), lambda m: not missing(families, m), worker.log)
    finally:
        worker.stop()

    assert "pipelines_messages_dead_lettered_total" in families  # the table was read
    assert len(families) >= 18
    failed = scraped["pipelines_messages_failed_total"]
    assert failed[(("actor", "charge_payment"), ("queue", "orders"))] == 0
    assert scraped["pipelines_runs_total"][(("outcome", "failed"), ("pipeline", "order_fulfilment"))] == 0
