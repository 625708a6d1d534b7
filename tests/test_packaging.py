"""Installing the package from a checkout (`pip install <checkout>`, editable or not) leaves the checkout
as it was: no build/ nor egg-info folder in it, ignored by git or not. Offline: no dependencies, and the
build backend's requirement (setuptools) is this virtualenv's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.checkout import copy_checkout

TIMEOUT_S = 120


def git(checkout: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args]
    return subprocess.run(command, cwd=checkout, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_pip_install_of_a_checkout_leaves_it_clean(tmp_path: Path, editable: bool) -> None:
    checkout = copy_checkout(tmp_path / "checkout")
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "the checkout")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)

    # --ignore-installed: this virtualenv's own (editable) install is left alone, not replaced.
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed"]
    subprocess.run(
        [*pip, "--prefix", str(venv), *(["-e"] if editable else []), str(checkout)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )

    assert git(checkout, "status", "--porcelain", "--ignored") == ""
    if not editable:
        installed = next((venv / "lib").glob("python3*/site-packages/pipelines"))
        assert (installed / "store" / "lua" / "create.lua").is_file()
        assert (installed / "middleware" / "metrics.py").is_file()
