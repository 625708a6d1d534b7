"""The public API of the packages: ``__all__`` is sorted, complete and names only what exists.

``pipelines`` is a lazy facade (PEP 562): its names are imported on first use, so these tests load
every name before looking at the namespace, and check that the table the facade loads from and the
imports type checkers read say the same thing.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import pipelines
import pipelines.middleware

PACKAGES = [pipelines, pipelines.middleware]
ROOT = Path(__file__).resolve().parents[1]
#: Third-party packages `import pipelines` must not load: what made it take most of a second.
HEAVY = (
    "dramatiq",
    "pika",
    "redis",
    "opentelemetry",
    "periodiq",
    "prometheus_client",
    "cryptography",
    "pydantic",
    "pydantic_settings",
)


def own_public_names(package: ModuleType) -> set[str]:
    """Public classes and functions in the package namespace that come from the package itself."""
    for name in package.__all__:
        getattr(package, name)  # a lazy name is in the namespace once used
    names = set()
    for name, value in vars(package).items():
        if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        if value.__module__ == package.__name__ or value.__module__.startswith(package.__name__ + "."):
            names.add(name)
    return names


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_is_sorted(package: ModuleType) -> None:
    assert package.__all__ == sorted(package.__all__, key=_isort_style)


def _isort_style(name: str) -> tuple[int, str]:
    """Constants first, then classes, then the rest: the order ruff's RUF022 keeps."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_name_in_all_exists(package: ModuleType) -> None:
    missing = [name for name in package.__all__ if not hasattr(package, name)]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_has_no_duplicates(package: ModuleType) -> None:
    assert len(package.__all__) == len(set(package.__all__))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_public_class_and_function_of_the_package_is_in_all(package: ModuleType) -> None:
    assert own_public_names(package) - set(package.__all__) == set()


def test_the_composition_primitives_and_errors_are_public() -> None:
    expected = {"chain", "fan_out", "group", "for_each", "chord", "step", "configure", "publish", "PipelinesError"}
    assert expected <= set(pipelines.__all__)


def _type_checking_imports(path: Path) -> dict[str, str]:
    """name → module of the imports under ``if TYPE_CHECKING:`` (what mypy and IDEs see)."""
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                assert statement.module
                found.update((alias.asname or alias.name, statement.module) for alias in statement.names)
    return found


#: What each lazy facade defines itself rather than imports on first use.
DEFINED_HERE = {"pipelines": {"publish", "publish_async"}, "pipelines.middleware": set()}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_the_lazy_names_are_the_ones_type_checkers_see_from_the_same_modules(package: ModuleType) -> None:
    table: dict[str, str] = package._EXPORTS
    assert package.__file__ is not None

    assert _type_checking_imports(Path(package.__file__)) == table
    assert set(table) | DEFINED_HERE[package.__name__] == set(package.__all__)
    for name in DEFINED_HERE[package.__name__]:
        assert getattr(package, name).__module__ == package.__name__
    for name, module in table.items():
        assert getattr(package, name) is getattr(sys.modules[module], name)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_no_public_name_is_also_a_submodule_whose_import_would_replace_it(package: ModuleType) -> None:
    assert package.__file__ is not None
    directory = Path(package.__file__).parent
    submodules = {path.stem for path in directory.iterdir() if path.suffix == ".py" or path.is_dir()}

    assert set(package.__all__) & submodules == set()


def test_an_unknown_name_is_an_attribute_error_as_for_any_module() -> None:
    with pytest.raises(AttributeError, match="module 'pipelines' has no attribute 'chian'"):
        pipelines.chian  # type: ignore[attr-defined]  # noqa: B018  (the misspelt lookup is the test)


def test_map_still_works_as_the_old_name_of_for_each_with_a_deprecation_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(vars(pipelines), "map", raising=False)  # as in a process that never used it

    with pytest.warns(DeprecationWarning, match="pipelines.map is now pipelines.for_each"):
        old = pipelines.map  # type: ignore[attr-defined]  # the old name is not in the typed surface

    assert old is pipelines.for_each
    assert "map" not in pipelines.__all__  # `from pipelines import *` leaves the built-in alone


def _loaded_after(code: str) -> list[str]:
    """The modules of ours and of HEAVY that a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return [m for m in result.stdout.split() if m.split(".")[0] in ("pipelines", "actors", *HEAVY)]


def test_importing_the_package_or_its_options_loads_nothing_but_them() -> None:
    assert _loaded_after("import pipelines") == ["pipelines"]
    assert _loaded_after("from pipelines import options") == ["pipelines", "pipelines.options"]
    assert _loaded_after("import pipelines.middleware") == ["pipelines", "pipelines.middleware"]


def test_the_cli_answers_help_without_loading_the_framework() -> None:
    loaded = _loaded_after(
        "import contextlib, io\nfrom pipelines.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    main(['--help'])"
    )

    assert loaded == ["pipelines", "pipelines.cli"]


def test_using_a_name_loads_its_module_and_what_that_needs_only() -> None:
    loaded = _loaded_after("import pipelines\npipelines.chain")

    assert "pipelines.composition" in loaded
    assert "pipelines.app" not in loaded
