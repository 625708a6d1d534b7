"""docker-compose.yml starts the console beside the workers, reachable from this machine only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.config.problems import ENV_PREFIX
from pipelines.config.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def console_service() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service: dict[str, Any] = compose["services"]["console"]
    return service


def compose_settings(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in service["environment"].items():
        if name.startswith(ENV_PREFIX):
            monkeypatch.setenv(name, str(value).replace("${CONSOLE_TOKEN:-}", "from-the-shell-0123"))
    return load_settings(ROOT / "config.toml")


def test_the_console_service_serves_pipelines_ui_on_loopback(console_service: dict[str, Any]) -> None:
    settings_port = Settings.from_values({}).ui.port
    assert console_service["command"] == f"pipelines ui --host 0.0.0.0 --port {settings_port}"
    assert console_service["ports"] == [f"127.0.0.1:{settings_port}:{settings_port}"]
    assert console_service["image"] == "rabbit-pipelines:local"
    assert {name: dep["condition"] for name, dep in console_service["depends_on"].items()} == {
        "rabbitmq": "service_healthy",
        "redis": "service_healthy",
    }


def test_its_environment_validates_and_points_at_the_workers_metrics_and_jaeger(
    console_service: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = compose_settings(console_service, monkeypatch)

    assert settings.ui.token == "from-the-shell-0123"
    assert settings.ui.metrics_urls == tuple(
        f"http://{worker}:{settings.metrics.port}/metrics" for worker in ("worker", "worker-long")
    )
    assert settings.ui.jaeger_url == "http://localhost:16686"
    assert "localhost" in settings.ui.allowed_hosts
    assert (settings.broker.url, settings.store.url) == ("amqp://guest:guest@rabbitmq:5672/%2F", "redis://redis:6379/0")
