"""A run's result is typed from its pipeline's last step, so ``mypy --strict`` checks a user's code.

The user's module below goes through mypy's own API, as ``mypy --strict`` would check it in the user's
project: each ``reveal_type`` must show the last step's return type, and a misspelt field must be an
error.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mypy import api

USER_MODULE = """
from typing import Any

import dramatiq

from pipelines import chain, chord, for_each, step
from pipelines.app import App


class Receipt:
    total: float


@dramatiq.actor
def charge(order_id: int) -> Receipt:
    raise NotImplementedError


@dramatiq.actor
def count(items: list[Any]) -> int:
    return len(items)


async def use(app: App) -> None:
    reveal_type(app.start(step(charge, 1)).result())
    reveal_type(app.start(chain(step(charge, 1), step(count))).result())
    reveal_type(app.start(chord(for_each(charge, [1, 2]), then=step(count))).result())
    reveal_type(app.start(charge.message(3)).result())
    reveal_type(step(charge, 1).run().result())
    reveal_type(await (await app.start_async(step(charge, 1))).result_async())
    reveal_type(app.run("registered_by_name").result())
    app.start(step(charge, 1)).result().totl
"""


def test_results_are_typed_from_the_last_step_and_checked_by_mypy_strict(tmp_path: Path) -> None:
    module = tmp_path / "shop.py"
    module.write_text(textwrap.dedent(USER_MODULE))

    report, _, _ = api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(module)])

    revealed = re.findall(r'Revealed type is "([^"]+)"', report)
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert revealed == [
        "shop.Receipt",
        "int",
        "int",
        "shop.Receipt",
        "shop.Receipt",
        "shop.Receipt",
        "Any",
    ]
    assert len(errors) == 1
    assert '"Receipt" has no attribute "totl"' in errors[0]
