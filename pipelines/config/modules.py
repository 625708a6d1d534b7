"""The user's modules named in ``[app]``: the actors, and optionally a mapping of registered pipelines.

Imported by the app when it needs them (the CLI, or the first look-up of a pipeline name it does not
know), so every process that configures the app finds the same registered pipelines.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from pipelines.config.sections import AppConfig
from pipelines.errors import ConfigError


def import_path(path: str, key: str) -> Any:
    """The module (``module``) or attribute (``module:attribute``) ``path`` names; ``key`` is its config key.

    Raises:
        ConfigError: The module cannot be imported or has no such attribute.
    """
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{key} = {path!r}: cannot import {module_name!r} ({e}).") from None
    if not attribute:
        return module
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"{key} = {path!r}: module {module_name!r} has no {attribute!r}.") from None


def load_app_modules(config: AppConfig) -> Mapping[str, Any]:
    """Import ``app.actors``, then return the ``app.pipelines`` mapping (empty when not configured).

    Raises:
        ConfigError: A module or attribute named there does not exist, or the mapping is not one.
    """
    import_path(config.actors, "app.actors")
    if config.pipelines is None:
        return {}  # the actors register theirs (app.register)
    registry = import_path(config.pipelines, "app.pipelines")
    if not isinstance(registry, Mapping):
        raise ConfigError(f"app.pipelines = {config.pipelines!r} is not a mapping of name to pipeline.")
    return registry
