"""The README's "Your own project", followed as a newcomer would: the wheel in a fresh virtualenv, the
section's own files (``shop.py``, ``config.toml``) in an empty directory, and its own commands run
there as written (``dramatiq shop``, ``pipelines run ...``, the Python line), on the real RabbitMQ and
Redis.

The fresh virtualenv gets the wheel and its dependencies from pip, as ``pip install`` from PyPI gives
them (console scripts such as ``dramatiq`` included), but offline: the dependencies are wheels packed
from this virtualenv's installed files (``tests/wheelhouse.py``), and the wheel is built without build
isolation (setuptools comes with the dev extra). About 90 s on this two-core machine under load (most of it
building and installing the virtualenv, once per module).
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.backends import AMQP_URL, REDIS_URL
from tests.support.checkout import copy_checkout
from tests.support.housekeeping import start_process, stop_process
from tests.support.wheelhouse import wheelhouse

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120
#: The first setuptools that reads pyproject.toml's license expression (the build's requirement).
SETUPTOOLS_AT_LEAST = 77


@dataclass(frozen=True)
class Section:
    """What the README's "Your own project" shows: the files to write and the commands to type."""

    shop_py: str
    config_toml: str
    worker: list[str]
    cli: list[str]
    python_line: str


def readme_section() -> Section:
    """The section's code blocks and its Python line, as written (comments after ``#`` dropped)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Your own project\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.DOTALL)
    shop = next(body for kind, body in blocks if kind == "python")
    config = next(body for kind, body in blocks if kind == "toml")
    commands = next(body for kind, body in blocks if kind == "" and "dramatiq" in body)
    worker, cli = (shlex.split(line, comments=True) for line in commands.strip().splitlines())
    line = re.search(r"imports `shop`: `([^`]+)`", section)
    assert line is not None, "the README's section no longer shows the Python line that runs the pipeline"
    return Section(shop, config, worker, cli, line.group(1))


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with this project's wheel installed by pip, dependencies and all (nothing downloaded)."""
    if int(importlib.metadata.version("setuptools").split(".")[0]) < SETUPTOOLS_AT_LEAST:
        pytest.fail(f"setuptools>={SETUPTOOLS_AT_LEAST} builds the wheel: run `make install`.", pytrace=False)
    base = tmp_path_factory.mktemp("fresh")
    # Built from a copy of the repository's files (git's view: no build/ or egg-info of an earlier build).
    source = copy_checkout(base / "source")
    pip = [sys.executable, "-m", "pip"]
    into_venv = [*pip, "--python", str(base / "venv" / "bin" / "python"), "install", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(base), str(source)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    (wheel,) = base.glob("rabbit_pipelines-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata_file = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_file).decode())
    wheels = base / "wheels"
    wheelhouse(metadata.get_all("Requires-Dist") or [], wheels)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    # `pip install <the wheel>` into it, its dependencies found among the local wheels only.
    subprocess.run(
        [*into_venv, "--no-index", "--find-links", str(wheels), str(wheel)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    return venv


@pytest.fixture
def project(namespaces: Callable[[], str], tmp_path: Path) -> Path:
    """An empty directory with the README's two files, its namespace and the test services' URLs set."""
    namespace = namespaces()
    section = readme_section()
    (tmp_path / "shop.py").write_text(section.shop_py)
    config, count = re.subn(r'^namespace = ".*"$', f'namespace = "{namespace}"', section.config_toml, flags=re.M)
    assert count == 1, "the README's config.toml no longer sets the namespace"
    (tmp_path / "config.toml").write_text(f'{config}\n[broker]\nurl = "{AMQP_URL}"\n\n[store]\nurl = "{REDIS_URL}"\n')
    return tmp_path


def _shell(venv: Path) -> dict[str, str]:
    """A newcomer's shell after `. .venv/bin/activate`: nothing of this repository's on the path or in PIPELINES_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "PYTHONPATH", "VIRTUAL_ENV"))}
    return env | {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}


def test_the_wheel_installs_one_package_and_no_example_code(fresh_venv: Path) -> None:
    (wheel,) = fresh_venv.parent.glob("rabbit_pipelines-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top_level = {name.split("/", 1)[0] for name in archive.namelist()} - {
            name for name in (n.split("/", 1)[0] for n in archive.namelist()) if name.endswith(".dist-info")
        }
    probe = (
        "import importlib.util as u; "
        "print(u.find_spec('actors'), u.find_spec('middleware'), "
        "u.find_spec('pipelines.middleware.backoff') is not None)"
    )
    found = subprocess.run(
        ["python", "-c", probe], cwd=fresh_venv, env=_shell(fresh_venv), capture_output=True, text=True, check=True
    )

    assert top_level == {"pipelines"}
    assert found.stdout.split() == ["None", "None", "True"]


def test_the_readme_project_runs_from_an_empty_directory_with_the_readmes_commands(
    fresh_venv: Path, project: Path
) -> None:
    section, env = readme_section(), _shell(fresh_venv)
    assert section.worker[0] == "dramatiq"
    assert shutil.which("dramatiq", path=env["PATH"]) == str(fresh_venv / "bin" / "dramatiq")
    log = project / "worker.log"
    with log.open("wb") as out:
        worker = start_process(section.worker, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = subprocess.run(
            section.cli, check=False, cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        produced = subprocess.run(
            ["python", "-c", f"import shop; print({section.python_line})"],
            check=False,
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        stop_process(worker)

    assert started.returncode == 0, started.stderr + log.read_text()
    assert re.search(r"sum_doubled\s+succeeded", started.stdout), started.stdout
    assert started.stdout.splitlines()[-1] == "result: 10"
    assert (produced.returncode, produced.stdout.strip()) == (0, "10"), produced.stderr + log.read_text()
