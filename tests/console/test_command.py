"""``pipelines ui``: serves the console until interrupted, keeps its token secret, says how to install it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dramatiq
import httpx
import pytest

import pipelines.current
from pipelines.cli import main
from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

CONFIG = """
namespace = "console-command"
[app]
actors = "pipelines.errors"
[broker]
url = "memory://"
[store]
url = "memory://"
"""
SECRET = "secret-token-4f1c"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    return path


def test_pipelines_ui_serves_the_console_and_its_api_until_interrupted(config: Path) -> None:
    port = free_port()
    command = Path(sys.executable).with_name("pipelines")
    server = start_process(
        [str(command), "--config", str(config), "ui", "--port", str(port)],
        env={**os.environ, "PIPELINES_UI__TOKEN": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "pipelines ui did not answer within 30 s"
                time.sleep(0.1)
        assert answer.json() == {"runs": [], "next_cursor": None}
        assert httpx.get(f"http://127.0.0.1:{port}/runs").status_code == 200
        refused = httpx.post(f"http://127.0.0.1:{port}/api/dead-letters/purge", json={"confirm": True})
        assert refused.status_code == 401
        allowed = httpx.post(
            f"http://127.0.0.1:{port}/api/dead-letters/purge",
            json={"confirm": True},
            headers={"Authorization": f"Bearer {SECRET}"},
        )
        assert allowed.json() == {"purged": 0}
    finally:
        server.send_signal(signal.SIGINT)
        try:
            output, _ = server.communicate(timeout=30)
        finally:
            stop_process(server)
    assert server.returncode == 0
    assert f"on http://127.0.0.1:{port}/" in output
    assert SECRET not in output


def test_the_token_is_masked_in_the_printed_configuration(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPELINES_UI__TOKEN", SECRET)

    assert main(["--config", str(config), "config"]) == 0

    printed = capsys.readouterr().out
    assert SECRET not in printed
    assert '"token": "***"' in printed


def test_without_the_ui_extra_the_command_says_how_to_install_it(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command configures the process's app and Dramatiq's broker: both are put back afterwards.
    monkeypatch.setattr(pipelines.current, "_app", None)
    monkeypatch.setattr(dramatiq.broker, "global_broker", dramatiq.broker.global_broker)
    monkeypatch.delitem(sys.modules, "pipelines.console.server", raising=False)
    monkeypatch.setitem(sys.modules, "uvicorn", None)

    assert main(["--config", str(config), "ui"]) == 2

    assert "pip install 'rabbit-pipelines[ui]'" in capsys.readouterr().err
