"""The documentation's examples run as written, on the embedded broker and store (no services).

Each ``docs/examples/*.py`` is the code a page shows. It runs here as a script in a fresh interpreter
(its own ``pipelines.configure()``, its own actors), from an empty directory, with ``memory://`` for
the broker and the store; it asserts what the page says it does. A TOML example is a ``config.toml``
the settings must accept. Getting started's commands that need no services run here too, as written,
in a shell, beside the page's ``shop.py`` (``tests/test_own_project.py`` runs the others on the services).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from pipelines.config.settings import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"
SCRIPTS = sorted((DOCS / "examples").glob("*.py"))
CONFIGS = sorted((DOCS / "examples").glob("*.toml"))
COMMANDS = DOCS / "examples" / "getting_started"
TIMEOUT_S = 30


def embedded_environment() -> dict[str, str]:
    """This environment without any PIPELINES_* of its own, pointed at the embedded broker and store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")}
    return env | {
        "PIPELINES_NAMESPACE": f"docs-{uuid.uuid4().hex[:8]}",
        "PIPELINES_BROKER__URL": "memory://",
        "PIPELINES_STORE__URL": "memory://",
    }


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_example_runs_on_the_embedded_mode(script: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=embedded_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )

    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_the_example_configuration_is_valid(config: Path) -> None:
    settings = Settings.from_values(tomllib.loads(config.read_text()))

    assert settings.namespace


def beside_the_shop(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One of Getting started's command files, run by a shell in ``cwd`` with the page's ``shop.py`` there.

    ``python`` and ``pipelines`` are this interpreter's and its console script.
    """
    shutil.copy(DOCS / "examples" / "shop.py", cwd)
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["sh", "-e", str(COMMANDS / command)],
        cwd=cwd,
        env=env | {"PATH": path},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_shop_runs_on_the_embedded_mode_by_the_command_getting_started_gives(tmp_path: Path) -> None:
    # No PIPELINES_* here: the command's own variables choose the embedded broker and store.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")}

    done = beside_the_shop("embedded.sh", tmp_path, env)

    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cli_finds_the_shop_by_its_app_option_without_a_config_file(tmp_path: Path) -> None:
    done = beside_the_shop("app_option.sh", tmp_path, embedded_environment())

    assert done.returncode == 0, done.stdout + done.stderr
    assert re.fullmatch(r"[0-9a-f]{32}", done.stdout.strip()), done.stdout
