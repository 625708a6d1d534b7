"""Imports run one way and every module imports on its own.

Each module is imported first thing in a process holding no module of ours, so an import cycle fails
whichever of its modules is entered first: what passes here imports in any order. The direction
itself (CLI, test helpers, composition root, middleware, core; nothing of ours imports the example
domain) is the import-linter contract in pyproject.toml, which `make lint` checks too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUNNER = Path(__file__).with_name("support") / "fresh_imports.py"


def modules(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Every module of ``packages`` under ``root``, following links (``pipelines/middleware`` is one)."""
    found = []
    for package in packages:
        for directory, subdirectories, files in os.walk(root / package, followlinks=True):
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            for file in files:
                if file.endswith(".py"):
                    parts = (Path(directory) / file).relative_to(root).with_suffix("").parts
                    found.append(".".join(parts).removesuffix(".__init__"))
    return sorted(found)


def import_each(root: Path, names: list[str]) -> dict[str, list[str]]:
    """The modules that fail to import on their own, with the end of their traceback."""
    # From `root` and without PIPELINES_* variables, as a user's shell would (`actors` reads config.toml).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")} | {"PYTHONPATH": str(root)}
    result = subprocess.run(
        [sys.executable, str(RUNNER), *names],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    failures: dict[str, list[str]] = json.loads(result.stdout)
    return failures


def test_every_module_imports_on_its_own_in_any_order() -> None:
    names = modules(ROOT, ("pipelines", "actors"))
    assert {"pipelines", "pipelines.app", "pipelines.middleware.backoff", "actors", "actors.demo"} <= set(names)

    assert import_each(ROOT, names) == {}


def test_a_module_entered_in_the_middle_of_an_import_cycle_is_reported(tmp_path: Path) -> None:
    # The shape `import middleware` once had: the package imports a module that imports the package
    # back for a name the package has not defined yet.
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("from cyclic.part import Part\nBase = object\n")
    (package / "part.py").write_text("from cyclic import Base\nclass Part(Base): ...\n")
    (tmp_path / "fine.py").write_text("import json\n")

    failures = import_each(tmp_path, ["cyclic", "cyclic.part", "fine"])

    assert set(failures) == {"cyclic", "cyclic.part"}
    assert "partially initialized module 'cyclic'" in failures["cyclic.part"][-1]


def test_the_import_contracts_hold() -> None:
    result = subprocess.run(
        [str(BIN / "lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 kept, 0 broken" in result.stdout
