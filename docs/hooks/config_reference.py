"""An MkDocs hook: the configuration reference, generated from the settings models at build time.

A page that holds the marker ``<!-- config-reference -->`` gets, in its place, one table per section of
``config.toml``: every key with its type, default, environment variable and the docstring of its
field in ``pipelines/config/sections.py``. A key without a docstring fails the build, so the page
cannot drift from the code.

The docstrings are read from the models' source here, at build time: pydantic's ``use_attribute_docstrings``
would read them in every process that loads the settings (tens of ms of every worker's and command's start).
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pipelines.config.problems import ENV_PREFIX
from pipelines.config.settings import Settings

MARKER = "<!-- config-reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker with the reference; leave every other page as it is."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())


def reference() -> str:
    """Every section's table, top-level keys first."""
    top = [(name, field) for name, field in Settings.model_fields.items() if not _is_section(field)]
    parts = ["### Top-level keys", "", *_table(Settings, top, section=()), ""]
    for name, field in Settings.model_fields.items():
        if _is_section(field):
            parts += _section((name,), field)
    return "\n".join(parts)


def _section(path: tuple[str, ...], field: FieldInfo) -> list[str]:
    model = field.annotation
    assert isinstance(model, type)
    assert issubclass(model, BaseModel)
    keys = [(name, f) for name, f in model.model_fields.items() if not _is_section(f)]
    intro = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    parts = [f"### [{'.'.join(path)}]", "", intro, "", *_table(model, keys, section=path), ""]
    for name, sub in model.model_fields.items():
        if _is_section(sub):
            parts += _section((*path, name), sub)
    return parts


def _docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string right under it in the class body), by field name."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not cls.__module__.startswith("pipelines."):  # pydantic's own bases declare no setting
            continue
        [node] = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
        assert isinstance(node, ast.ClassDef)
        for field, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[field.target.id] = inspect.cleandoc(after.value.value)
    return found


def _table(model: type[BaseModel], keys: list[tuple[str, FieldInfo]], *, section: tuple[str, ...]) -> list[str]:
    rows = ["| key | type | default | environment variable | what it sets |", "| --- | --- | --- | --- | --- |"]
    docstrings = _docstrings(model)
    for name, field in keys:
        doc = docstrings.get(name)
        if not doc:
            where = ".".join((*section, name))
            raise PluginError(f"The setting {where} has no docstring: add one under its field in the settings model.")
        variable = ENV_PREFIX + "__".join((*section, name)).upper()
        description = doc.replace("\n", " ").replace("|", "\\|")
        rows.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | `{variable}` | {description} |")
    return rows


def _is_section(field: FieldInfo) -> bool:
    return isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type(a) for a in args if a is not type(None)) + " (optional)"
    if origin is tuple:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "table of strings"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: FieldInfo) -> str:
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, Path):
        value = str(value)
    return f"`{json.dumps(value)}`"
