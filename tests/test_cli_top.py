"""`pipelines top`: rates counted over its interval, and plain refreshes when its output is piped.

The real commands against the real RabbitMQ and Redis, and a stock `dramatiq actors` worker serving
its metrics.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.housekeeping import stop_process
from tests.support.ports import free_port
from tests.test_cli import TIMEOUT_S, environment, pipelines_started
from tests.test_metrics_groups import metrics_env
from tests.test_observability_processes import Worker, pipelines, wait_for_scrape


def test_top_once_shows_the_rates_of_the_messages_processed_during_its_interval(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    env = metrics_env(namespaces(), free_port(), tmp_path / "samples")
    namespace = env["PIPELINES_NAMESPACE"]
    worker = Worker(env, tmp_path / "worker.log")
    try:
        wait_for_scrape(
            int(env["PIPELINES_METRICS__PORT"]), lambda m: m.get("pipelines_workers", {}).get((), 0) == 2, worker.log
        )
        top = pipelines_started(
            env, "top", "--once", "--interval", "5", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            while top.poll() is None:  # runs go through the worker for as long as top counts
                ran = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/rate.jpg", "--wait")
                assert ran.returncode == 0, ran.stderr
            frame, errors = top.communicate(timeout=TIMEOUT_S)
        finally:
            stop_process(top)
    finally:
        worker.stop()

    assert top.returncode == 0, errors
    rates = re.findall(rf"^{namespace}\.\S+\s+\d+\s+\d+\s+(\d+\.\d)\s+\d+\.\d\s*$", frame, re.MULTILINE)
    assert rates, frame
    assert sum(float(rate) for rate in rates) > 0, frame


def test_top_piped_into_another_command_prints_each_refresh_as_plain_text(namespaces: Callable[[], str]) -> None:
    env = environment(namespaces())
    title = f"namespace {env['PIPELINES_NAMESPACE']}"
    top = pipelines_started(env, "top", "--interval", "0.2", stdout=subprocess.PIPE)
    shown = b""
    try:
        assert top.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(top.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + TIMEOUT_S
            while shown.decode().count(title) < 2 and time.monotonic() < deadline:
                if selector.select(timeout=deadline - time.monotonic()):
                    shown += os.read(top.stdout.fileno(), 65536)
    finally:
        stop_process(top)

    text = shown.decode()
    assert text.count(title) >= 2, text  # a second refresh, printed below the first
    assert "recent run" in text
    assert "\x1b[" not in text  # no cursor movement nor colour in a pipe
