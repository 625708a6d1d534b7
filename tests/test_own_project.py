"""The README's "Your own project", followed as a newcomer would: the wheel in a fresh virtualenv, a
project of its own in an empty directory, a worker from the stock ``dramatiq`` CLI, runs started by the
``pipelines`` CLI and by a plain Python process, on the real RabbitMQ and Redis.

The fresh virtualenv gets only the wheel; the libraries it depends on are taken from this one (a
``.pth`` line), so the test needs no download and still sees only what the wheel installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.backends import AMQP_URL, REDIS_URL
from tests.housekeeping import start_process, stop_process

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120

SHOP = """
import dramatiq
import pipelines
from pipelines import chain, step

app = pipelines.configure()  # reads ./config.toml and PIPELINES_*


@dramatiq.actor
def add(x: int, y: int) -> int:
    return x + y


@dramatiq.actor
def double(x: int) -> int:
    return x * 2


app.register("sum_doubled", chain(step(add), step(double)))
"""

PRODUCER = """
import shop

print(shop.app.run("sum_doubled", x=4, y=1).result(timeout_s=60))
"""


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding only this project's wheel (its dependencies visible from this venv)."""
    base = tmp_path_factory.mktemp("fresh")
    # Built from a copy of the repository's files (git's view: no build/ or egg-info of an earlier build).
    source = base / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in tracked.split():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():
            target.symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, target)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base), str(source)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    (wheel,) = base.glob("rabbit_pipelines-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    return venv


@pytest.fixture
def project(namespaces: Callable[[], str], tmp_path: Path) -> Path:
    """An empty directory made into the README's project, in a namespace of its own (deleted after)."""
    namespace = namespaces()
    (tmp_path / "shop.py").write_text(textwrap.dedent(SHOP))
    (tmp_path / "producer.py").write_text(textwrap.dedent(PRODUCER))
    (tmp_path / "config.toml").write_text(
        f'namespace = "{namespace}"\n\n[app]\nactors = "shop"\n\n'
        f'[broker]\nurl = "{AMQP_URL}"\n\n[store]\nurl = "{REDIS_URL}"\n'
    )
    return tmp_path


def _env() -> dict[str, str]:
    """The environment of a newcomer's shell: nothing of this repository's on the path or in PIPELINES_*."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "PYTHONPATH", "VIRTUAL_ENV"))}


def test_the_wheel_installs_one_package_and_no_example_code(fresh_venv: Path) -> None:
    (wheel,) = fresh_venv.parent.glob("rabbit_pipelines-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top_level = {name.split("/", 1)[0] for name in archive.namelist()} - {
            name for name in (n.split("/", 1)[0] for n in archive.namelist()) if name.endswith(".dist-info")
        }
    python = str(fresh_venv / "bin" / "python")
    probe = (
        "import importlib.util as u; "
        "print(u.find_spec('actors'), u.find_spec('middleware'), "
        "u.find_spec('pipelines.middleware.backoff') is not None)"
    )
    found = subprocess.run(
        [python, "-c", probe], cwd=fresh_venv, env=_env(), capture_output=True, text=True, check=True
    )

    assert top_level == {"pipelines"}
    assert found.stdout.split() == ["None", "None", "True"]


def test_the_readme_project_runs_from_an_empty_directory(fresh_venv: Path, project: Path) -> None:
    python, cli = str(fresh_venv / "bin" / "python"), str(fresh_venv / "bin" / "pipelines")
    log = project / "worker.log"
    with log.open("wb") as out:
        worker = start_process(
            [python, "-m", "dramatiq", "shop", "--processes", "1", "--threads", "2"],
            cwd=project,
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        started = subprocess.run(
            [cli, "run", "sum_doubled", "--arg", "x=2", "--arg", "y=3", "--wait"],
            check=False,
            cwd=project,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        produced = subprocess.run(
            [python, "producer.py"],
            check=False,
            cwd=project,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        stop_process(worker)

    assert started.returncode == 0, started.stderr + log.read_text()
    assert "succeeded" in started.stdout
    assert "10" in started.stdout
    assert (produced.returncode, produced.stdout.strip()) == (0, "10"), produced.stderr + log.read_text()
