"""A copy of this checkout as git sees it: its tracked files and the new ones it does not ignore, as
they are in the working tree (no build/, egg-info or virtualenv of this one), links kept as links."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_checkout(target: Path) -> Path:
    """Copy the checkout's files into ``target`` (created); returns it."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in listed.split():
        copied = target / name
        copied.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():
            copied.symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, copied)
    return target
