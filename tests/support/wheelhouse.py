"""Wheels of the distributions installed in this virtualenv, so a fresh one can be installed offline.

``pip install --no-index --find-links <wheelhouse> <project wheel>`` then does what ``pip install``
from PyPI does (resolves the wheel's dependencies from each wheel's metadata, generates console
scripts such as ``dramatiq``), with nothing downloaded: each dependency is packed again, at the version
installed here, from the files its RECORD lists (scripts and compiled bytecode left out: pip makes
those when it installs).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: Files of a dist-info directory that describe one installation, not the distribution.
_INSTALLATION_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})


def dependencies(requires: Iterable[str]) -> list[str]:
    """The installed distributions that ``requires`` (Requires-Dist lines) needs, extras and all, by name."""
    extras_of: dict[str, set[str]] = {}
    todo: list[tuple[str, tuple[str, ...]]] = [(text, ("",)) for text in requires]
    while todo:
        text, extras = todo.pop()
        requirement = Requirement(text)
        if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = canonicalize_name(requirement.name)
        known = extras_of.get(name)
        if known is not None and set(requirement.extras) <= known:
            continue
        extras_of[name] = (known or set()) | set(requirement.extras)
        wanted = tuple(extras_of[name]) or ("",)
        todo += [(sub, wanted) for sub in importlib.metadata.distribution(name).requires or []]
    return sorted(extras_of)


def repack(name: str, into: Path) -> Path:
    """A wheel of the installed distribution ``name``, written into ``into``."""
    dist = importlib.metadata.distribution(name)
    files = [f for f in dist.files or [] if not str(f).startswith("..") and f.suffix != ".pyc"]
    info = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    wheel_file = (dist.read_text("WHEEL") or "").splitlines()
    tags = [line.removeprefix("Tag:").strip().split("-") for line in wheel_file if line.startswith("Tag:")]
    # Every tag it was installed under, compressed: py2.py3-none-any, cp311-cp311-manylinux...
    tag = "-".join(".".join(sorted({t[part] for t in tags})) for part in range(3))
    wheel = into / f"{re.sub(r'[-_.]+', '_', dist.metadata['Name'])}-{dist.version}-{tag}.whl"
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for file in files:
            if file.parts[0] == info and file.name in _INSTALLATION_FILES:
                continue
            data = Path(str(file.locate())).read_bytes()
            archive.writestr(str(file), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{file},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def wheelhouse(requires: Iterable[str], into: Path) -> list[Path]:
    """Wheels of everything ``requires`` needs, as installed here, written into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    return [repack(name, into) for name in dependencies(requires)]
