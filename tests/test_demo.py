"""The demo (`make demo` runs `python -m actors.demo`) on the embedded mode and on the real services."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = Path(sys.executable).parent / "pipelines"
#: What `make demo` runs, from the repository's root.
DEMO = [sys.executable, "-m", "actors.demo"]
AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
EXAMPLES = ("order_fulfilment", "thumbnails", "shard_report", "notify_users")


def demo(*args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | variables
    return subprocess.run([*DEMO, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_the_demo_falls_back_to_the_embedded_mode_in_one_line_when_rabbitmq_does_not_answer() -> None:
    result = demo(PIPELINES_BROKER__URL="amqp://guest:guest@127.0.0.1:1/%2F")

    assert result.returncode == 0, result.stdout + result.stderr
    first_line = result.stdout.splitlines()[0]
    assert first_line.startswith("RabbitMQ at amqp://guest:***@127.0.0.1:1/%2F does not answer")
    assert first_line.endswith("running on the embedded broker and store.")
    assert result.stdout.count(" succeeded ") >= len(EXAMPLES) + 1
    assert "All demo runs succeeded." in result.stdout


def test_the_demo_runs_every_example_on_rabbitmq_and_redis(namespaces: Callable[[], str]) -> None:
    result = demo(PIPELINES_NAMESPACE=namespaces(), PIPELINES_BROKER__URL=AMQP_URL, PIPELINES_STORE__URL=REDIS_URL)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Using RabbitMQ at amqp://guest:***@")
    for name in EXAMPLES:
        assert f"  {name}  succeeded" in result.stdout
    assert "All demo runs succeeded." in result.stdout


def test_the_demo_runs_embedded_when_asked_even_if_the_services_answer() -> None:
    result = demo("--embedded", PIPELINES_BROKER__URL=AMQP_URL, PIPELINES_STORE__URL=REDIS_URL)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "--embedded given: running on the embedded broker and store."
    assert "All demo runs succeeded." in result.stdout


def test_the_pipelines_command_says_in_one_line_that_the_demo_ships_with_the_repository() -> None:
    result = subprocess.run([str(PIPELINES), "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "pipelines: The demo ships with the repository, not with the package: run `make demo` in a checkout "
        "(it runs `python -m actors.demo`)."
    ]
