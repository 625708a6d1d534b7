"""The public API of the packages: ``__all__`` is sorted, complete and names only what exists."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

import pipelines
import pipelines.middleware

PACKAGES = [pipelines, pipelines.middleware]


def own_public_names(package: ModuleType) -> set[str]:
    """Public classes and functions in the package namespace that come from the package itself."""
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
    expected = {"chain", "fan_out", "group", "map", "chord", "step", "configure", "publish", "PipelinesError"}
    assert expected <= set(pipelines.__all__)
