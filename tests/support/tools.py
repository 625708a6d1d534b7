"""The command-line tools some tests run, which `make tools` installs (scripts/ensure-tools)."""

from __future__ import annotations

import shutil

import pytest


def installed(tool: str, package: str) -> str:
    """The path of ``tool`` on the PATH; without it the test fails (never skips), naming ``package``."""
    path = shutil.which(tool)
    if path is None:
        pytest.fail(
            f"{tool} is not installed: run `make tools` (as root it installs Debian's {package} package).",
            pytrace=False,
        )
    return path
