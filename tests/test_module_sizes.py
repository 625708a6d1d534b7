"""Modules stay small enough to read in one sitting: past 400 lines, a module is split by concept."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def _modules() -> list[Path]:
    """Every module of ``pipelines/`` and ``middleware/`` (``pipelines/middleware`` is a link to the latter)."""
    found = []
    for package in ("pipelines", "middleware"):
        for directory, subdirectories, files in os.walk(ROOT / package):  # links not followed: each file once
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            found += [Path(directory) / name for name in files if name.endswith(".py")]
    return found


def test_every_module_is_found_once_with_the_middleware_among_them() -> None:
    names = [path.relative_to(ROOT).as_posix() for path in _modules()]

    assert len(names) == len(set(names))
    assert {"pipelines/app/application.py", "middleware/backoff.py", "pipelines/store/redis.py"} <= set(names)


def test_no_module_of_the_framework_passes_400_lines() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): count
        for path in _modules()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }

    assert long == {}, "split these by concept (a package of their own), not onto the flat level"
