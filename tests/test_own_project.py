"""Getting started followed as a newcomer would, on the real RabbitMQ and Redis: the page's install lines
run as written in a fresh directory, its two files (``shop.py``, ``config.toml``) in an empty one, and
its commands run there as written (``dramatiq shop``, ``pipelines run ...``, the Python that imports
``shop``). Each is read from the file under ``docs/examples/`` that the page includes; the README's
"Your own project" repeats them, and ``tests/test_docs.py`` holds the two equal.

The install lines get the wheel and its dependencies from pip, as ``pip install`` from PyPI gives them
(console scripts such as ``dramatiq`` included), but offline: pip finds ``rabbit-pipelines`` only among
local wheels, the project's own and its dependencies packed from this virtualenv's installed files
(``tests/support/wheelhouse.py``); the wheel is built without build isolation (setuptools comes with the dev
extra). About 90 s on this two-core machine under load (most of it building and installing the
virtualenv, once per module).
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
EXAMPLES = ROOT / "docs" / "examples"
COMMANDS = EXAMPLES / "getting_started"
TIMEOUT_S = 120
#: The first setuptools that reads pyproject.toml's license expression (the build's requirement).
SETUPTOOLS_AT_LEAST = 77


@dataclass(frozen=True)
class GettingStarted:
    """What Getting started shows: the lines that install, the files to write and the commands to type."""

    install: str
    shop_py: str
    config_toml: str
    worker: list[str]
    cli: list[str]
    python: str
    """The Python that imports ``shop``, its last line printed."""
    printed: str
    """What that last line gives, as its comment says."""


def getting_started() -> GettingStarted:
    """The files the page includes, as written (comments after ``#`` dropped from the commands)."""
    commands = (COMMANDS / "run.sh").read_text().strip().splitlines()
    worker, cli = (shlex.split(line, comments=True) for line in commands)
    *imports, last = (COMMANDS / "result.py").read_text().strip().splitlines()
    expression, printed = last.split("  # ")
    return GettingStarted(
        install=(COMMANDS / "install.sh").read_text(),
        shop_py=(EXAMPLES / "shop.py").read_text(),
        config_toml=(EXAMPLES / "shop_config.toml").read_text(),
        worker=worker,
        cli=cli,
        python="\n".join([*imports, f"print({expression})"]),
        printed=printed,
    )


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The virtualenv the page's install lines make, this project's wheel installed by pip (nothing downloaded)."""
    if int(importlib.metadata.version("setuptools").split(".")[0]) < SETUPTOOLS_AT_LEAST:
        pytest.fail(f"setuptools>={SETUPTOOLS_AT_LEAST} builds the wheel: run `make install`.", pytrace=False)
    base = tmp_path_factory.mktemp("fresh")
    # Built from a copy of the repository's files (git's view: no build/ or egg-info of an earlier build).
    source = copy_checkout(base / "source")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(base), str(source)],
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
    shutil.copy(wheel, wheels)
    # The newcomer's `python` is this interpreter, alone on the PATH: until the virtualenv is active, no
    # other `pip` can be found, so a step that failed cannot install anything anywhere else.
    path = base / "path"
    path.mkdir()
    (path / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (path / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "PYTHONPATH", "VIRTUAL_ENV", "PIP_"))}
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    installed = subprocess.run(
        [shutil.which("sh") or "/bin/sh", "-e", "-c", getting_started().install],
        cwd=base,
        env=env | offline | {"PATH": str(path)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return base / ".venv"


@pytest.fixture
def project(namespaces: Callable[[], str], tmp_path: Path) -> Path:
    """An empty directory with the page's two files, its namespace and the test services' URLs set."""
    namespace = namespaces()
    page = getting_started()
    (tmp_path / "shop.py").write_text(page.shop_py)
    config, count = re.subn(r'^namespace = ".*"$', f'namespace = "{namespace}"', page.config_toml, flags=re.M)
    assert count == 1, "the example's config.toml no longer sets the namespace"
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


def test_the_shop_runs_from_an_empty_directory_with_the_commands_getting_started_gives(
    fresh_venv: Path, project: Path
) -> None:
    page, env = getting_started(), _shell(fresh_venv)
    assert page.worker[0] == "dramatiq"
    assert shutil.which("dramatiq", path=env["PATH"]) == str(fresh_venv / "bin" / "dramatiq")
    log = project / "worker.log"
    with log.open("wb") as out:
        worker = start_process(page.worker, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = subprocess.run(
            page.cli, check=False, cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        produced = subprocess.run(
            ["python", "-c", page.python],
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
    assert (produced.returncode, produced.stdout.strip()) == (0, page.printed), produced.stderr + log.read_text()
