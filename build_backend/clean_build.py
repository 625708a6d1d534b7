"""The build backend: setuptools', with its working folders kept out of the checkout.

``pip install .`` builds in the checkout itself, and setuptools would leave ``build/`` and
``rabbit_pipelines.egg-info/`` there. Every hook that builds runs here with an extra setuptools config
(``DIST_EXTRA_CONFIG``) that puts both in a temporary folder, removed when the hook returns. An editable
install points at the checkout's modules, and leaves no folder either.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from setuptools import build_meta

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: The environment variable naming one more config file that setuptools reads (after setup.cfg).
EXTRA_CONFIG = "DIST_EXTRA_CONFIG"

P = ParamSpec("P")
T = TypeVar("T")


@contextlib.contextmanager
def _out_of_tree() -> Iterator[None]:
    """Run a hook with setuptools' build and egg-info folders in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="rabbit-pipelines-build-") as scratch:
        config = os.path.join(scratch, "setup.cfg")
        with open(config, "w") as out:
            out.write(f"[build]\nbuild_base = {scratch}/build\n\n[egg_info]\negg_base = {scratch}\n")
        before = os.environ.get(EXTRA_CONFIG)
        os.environ[EXTRA_CONFIG] = config
        try:
            yield
        finally:
            if before is None:
                del os.environ[EXTRA_CONFIG]
            else:
                os.environ[EXTRA_CONFIG] = before


def _kept_out(hook: Callable[P, T]) -> Callable[P, T]:
    """``hook`` of setuptools' backend, run with its folders out of the checkout."""

    @functools.wraps(hook)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with _out_of_tree():
            return hook(*args, **kwargs)

    return run


get_requires_for_build_wheel = _kept_out(build_meta.get_requires_for_build_wheel)
get_requires_for_build_sdist = _kept_out(build_meta.get_requires_for_build_sdist)
get_requires_for_build_editable = _kept_out(build_meta.get_requires_for_build_editable)
prepare_metadata_for_build_wheel = _kept_out(build_meta.prepare_metadata_for_build_wheel)
prepare_metadata_for_build_editable = _kept_out(build_meta.prepare_metadata_for_build_editable)
build_wheel = _kept_out(build_meta.build_wheel)
build_sdist = _kept_out(build_meta.build_sdist)
build_editable = _kept_out(build_meta.build_editable)
