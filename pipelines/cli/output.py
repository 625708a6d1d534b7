"""What the ``pipelines`` command prints: tables with headers, trees, JSON, colour only on a terminal.

Output goes through `rich`, which leaves out colour and styles when stdout is not a terminal (a pipe,
a file) or ``NO_COLOR`` is set; off a terminal, lines are never wrapped, so scripts can ``grep`` and
``awk`` them. JSON is printed with values as values: a run's result is JSON inside the document, not
a string holding JSON.

Everything printed is data, never markup: text a message or an actor wrote (an error such as ``got
[/x]``) is shown as it is, and every URL's password in it is masked (``pipelines.config.masking``), in tables,
lines and JSON alike.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from pipelines.config.masking import mask_secrets, mask_text

#: Width of lines written to a pipe or a file (never wrapped there).
UNWRAPPED_WIDTH = 10_000
#: Colour of each run and step state on a terminal.
STATE_STYLES = {
    "succeeded": "green",
    "failed": "bold red",
    "cancelled": "yellow",
    "retrying": "yellow",
    "running": "cyan",
    "pending": "dim",
    "skipped": "dim",
}


def _default(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)


def dumps(value: Any) -> str:
    """``value`` as indented JSON (dataclasses as objects; anything else unknown as its text)."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def when(epoch_ms: int | None) -> str:
    """An epoch-ms time as UTC, to the second (empty for None)."""
    if epoch_ms is None:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float | None) -> str:
    """A duration for people: ``0.012 s``, ``4.2 s``, ``3 m 12 s``."""
    if value is None:
        return ""
    if value < 10:
        return f"{value:.3f} s"
    if value < 120:
        return f"{value:.1f} s"
    minutes, rest = divmod(int(value), 60)
    return f"{minutes} m {rest} s"


def safe_text(value: str | Text) -> Text:
    """``value`` as text to print: never read as markup, passwords in URLs masked."""
    if isinstance(value, str):
        return Text(mask_text(value))
    masked = mask_text(value.plain)
    return value if masked == value.plain else Text(masked, style=value.style)


def state_text(state: str) -> Text:
    """A state, coloured by what it means (on a terminal)."""
    return Text(state, style=STATE_STYLES.get(state, ""))


class Output:
    """Stdout for one command: plain lines, tables, trees and JSON."""

    def __init__(self) -> None:
        terminal = sys.stdout.isatty()
        self.console = Console(
            highlight=False,
            soft_wrap=not terminal,
            width=None if terminal else UNWRAPPED_WIDTH,
            force_terminal=terminal,
        )

    def line(self, text: str | Text = "") -> None:
        """One line, printed as is (no markup, passwords masked)."""
        self.console.print(safe_text(text))

    def json(self, value: Any) -> None:
        """``value`` as JSON (see :func:`dumps`), passwords masked."""
        sys.stdout.write(dumps(mask_secrets(orjson.loads(dumps(value)))) + "\n")

    def render(self, renderable: RenderableType) -> None:
        """A table or a tree (off a terminal, without the padding at the ends of its lines)."""
        if self.console.is_terminal:
            self.console.print(renderable)
            return
        with self.console.capture() as captured:
            self.console.print(renderable)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str | Text]], *, title: str | None = None) -> None:
        """Rows under a header line, in aligned columns (no borders: easy to read and to cut)."""
        table = Table(box=None, pad_edge=False, show_edge=False, title=title, title_justify="left")
        for header in headers:
            table.add_column(header, no_wrap=True, header_style="bold")
        for row in rows:
            table.add_row(*(safe_text(cell) for cell in row))
        self.render(table)
