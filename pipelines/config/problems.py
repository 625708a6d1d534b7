"""How an invalid configuration is told to the user: one line naming the key, the value (secrets
masked), where it came from and what is expected."""

from __future__ import annotations

import json
import os

from pydantic import ValidationError

from pipelines.config.masking import mask_secrets, mask_url

#: Prefix of the environment variables that override the configuration.
ENV_PREFIX = "PIPELINES_"


def unparsable_variables() -> list[str]:
    """The ``PIPELINES_*`` variables whose value should be JSON (a list or table) and is not."""
    names = []
    for name, value in os.environ.items():
        if not name.startswith(ENV_PREFIX) or (not value.strip().startswith(("[", "{")) and "," not in value):
            continue
        try:
            json.loads(value)
        except ValueError:
            names.append(name)
    return sorted(names)


def explain(error: ValidationError, source: str) -> str:
    """The first problem of ``error`` as one line (and how many more there are)."""
    first = error.errors()[0]
    location = [str(part) for part in first["loc"]]
    key = ".".join(location)
    env_name = ENV_PREFIX + "__".join(part.upper() for part in location)
    value = "***" if location[:1] == ["encryption"] or location == ["ui", "token"] else _masked(first.get("input"))
    problem = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"Invalid configuration: unknown key {key!r} (in {source} or {env_name}). Check its spelling."
    more = f" ({len(error.errors()) - 1} more problem(s) after this one)" if len(error.errors()) > 1 else ""
    return f"Invalid configuration: {key} = {value!r} (from {source} or {env_name}): {problem}.{more}"


def _masked(value: object) -> object:
    """A value as given, its secrets masked: a string is one value (a URL even without its scheme, so a
    password in it is masked up to the last ``@`` whatever it holds), anything else masked throughout."""
    return mask_url(value) if isinstance(value, str) else mask_secrets(value)
