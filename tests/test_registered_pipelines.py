"""Registered pipelines are found wherever the app is configured: a producer, a `dramatiq` worker, the CLI.

A project of its own in a temporary directory (actors in ``shop.py``, the pipelines mapping in
``workflows.py``, named by ``[app]``), nothing calling ``app.load_modules()``: the docs' subscriber
starts a registered pipeline inside a stock `dramatiq shop` worker, and a producer starts one by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.housekeeping import fresh_namespace, start_process, stop_process

BIN = Path(sys.executable).parent
AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TIMEOUT_S = 60

SHOP = """
import dramatiq
import pipelines

app = pipelines.configure()


@dramatiq.actor(queue_name="shop")
def charge(order_id: int) -> int:
    return order_id * 10


@dramatiq.actor(queue_name="shop")
def ship(total: int) -> str:
    return f"shipped {total}"


@dramatiq.actor(queue_name="shop", subscribe=["order.placed"])
def start_fulfilment(order: dict) -> None:
    pipelines.current_app().run("fulfilment", order["order_id"], idempotency_key=f"order-{order['order_id']}")
"""

WORKFLOWS = """
from pipelines import chain
from shop import charge, ship

PIPELINES = {"fulfilment": chain(charge, ship)}
"""

PRODUCER = """
import json, sys, time
import pipelines

app = pipelines.configure()
if sys.argv[1] == "run":
    print(json.dumps(app.run("fulfilment", 4).result(timeout_s=30)))
else:
    app.publish("order.placed", {"order_id": 7})
    deadline = time.monotonic() + 30
    while not (found := app.runs(pipeline="fulfilment", key="order-7").runs) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the subscriber has started its run
    print(json.dumps([app.get_run(run.run_id).wait(30).state for run in found]))
"""


@pytest.fixture
def project(tmp_path: Path, delete_namespace: Callable[[str], None]) -> Iterator[tuple[Path, dict[str, str]]]:
    """The project's directory and environment, with `dramatiq shop` running in it."""
    (tmp_path / "shop.py").write_text(textwrap.dedent(SHOP))
    (tmp_path / "workflows.py").write_text(textwrap.dedent(WORKFLOWS))
    (tmp_path / "producer.py").write_text(textwrap.dedent(PRODUCER))
    namespace = fresh_namespace()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_") and k != "PYTHONPATH"}
    env |= {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_STORE__URL": REDIS_URL,
        "PIPELINES_APP__ACTORS": "shop",
        "PIPELINES_APP__PIPELINES": "workflows:PIPELINES",
        "PIPELINES_RETRIES__MAX_RETRIES": "0",
    }
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = start_process(
            [str(BIN / "dramatiq"), "shop", "--processes", "1", "--threads", "2"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "ready for action" not in log.read_text():  # its queues and bindings are declared
            assert worker.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        yield tmp_path, env
    finally:
        try:
            stop_process(worker, timeout_s=TIMEOUT_S)
        finally:
            delete_namespace(namespace)
    assert "UnknownPipeline" not in log.read_text(), log.read_text()[-2000:]


def _producer(project: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    directory, env = project
    return subprocess.run(
        [sys.executable, "producer.py", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.mark.integration
def test_a_producer_starts_a_registered_pipeline_by_name_without_loading_modules_itself(
    project: tuple[Path, dict[str, str]],
) -> None:
    started = _producer(project, "run")

    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout) == "shipped 40"


@pytest.mark.integration
def test_the_readme_subscriber_starts_a_registered_pipeline_inside_a_dramatiq_worker(
    project: tuple[Path, dict[str, str]],
) -> None:
    published = _producer(project, "publish")

    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout) == ["succeeded"]


def _cli(directory: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "pipelines"), *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.mark.integration
def test_the_cli_starts_the_projects_pipeline_from_its_directory(project: tuple[Path, dict[str, str]]) -> None:
    directory, env = project
    result = _cli(directory, env, "run", "fulfilment", "--arg", "order_id=2", "--wait")

    assert result.returncode == 0, result.stderr
    assert "shipped 20" in result.stdout


@pytest.mark.integration
def test_the_cli_imports_the_module_given_with_app_over_the_configured_one(
    project: tuple[Path, dict[str, str]],
) -> None:
    directory, env = project
    misconfigured = env | {"PIPELINES_APP__ACTORS": "no_such_module"}
    result = _cli(directory, misconfigured, "--app", "shop", "run", "fulfilment", "--arg", "order_id=3", "--wait")

    assert result.returncode == 0, result.stderr
    assert "shipped 30" in result.stdout
