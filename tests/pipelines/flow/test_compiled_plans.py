"""A pipeline started again reuses its compiled plan, and what each run stores is still as of its start."""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import pytest

from pipelines import chain, step
from pipelines.errors import DefinitionError, UnknownActor
from pipelines.flow import plan as plan_module
from pipelines.flow.compiled_plans import compiled_plan
from tests.support.fixtures import MakeApp, StartWorker
from tests.test_cli import environment

TIMEOUT_S = 30


def declare(app: Any) -> dict[str, Any]:
    @dramatiq.actor(broker=app.broker)
    def tag(tags: list[str], value: int = 0) -> list[str]:
        return [*tags, str(value)]

    @dramatiq.actor(broker=app.broker)
    def count(value: int) -> int:
        return value + 1

    return {"tag": tag, "count": count}


def test_a_node_started_again_is_compiled_once(make_app: MakeApp, monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app()
    a = declare(app)
    compiled: list[object] = []
    real = plan_module.compile_plan

    def counted(node: Any) -> Any:
        compiled.append(node)
        return real(node)

    monkeypatch.setattr("pipelines.flow.compiled_plans.compile_plan", counted)
    pipeline = chain(step(a["count"]), step(a["count"]))

    first, second = app.start(pipeline, args=(1,)), app.start(pipeline, args=(2,))

    assert compiled == [pipeline]
    assert first.id != second.id
    assert compiled_plan(pipeline) is compiled_plan(pipeline)


def test_each_run_stores_a_later_steps_arguments_as_they_are_when_it_starts(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    a = declare(app)
    tags = ["first"]
    pipeline = chain(step(a["count"]), step(a["tag"], tags))  # a list: its caller may change it
    start_worker(app)

    before = app.start(pipeline, args=(1,))
    assert before.result(TIMEOUT_S) == ["first", "2"]
    tags.append("second")
    after = app.start(pipeline, args=(1,))

    assert after.result(TIMEOUT_S) == ["first", "second", "2"]


def test_arguments_are_checked_for_each_new_shape_and_a_bad_one_is_refused_every_time(make_app: MakeApp) -> None:
    app = make_app()
    a = declare(app)
    pipeline = chain(step(a["count"]), step(a["count"]))
    app.start(pipeline, args=(1,))

    for _ in range(2):
        with pytest.raises(DefinitionError, match=r"Arguments do not fit step 0\.0"):
            app.start(pipeline, args=(1, 2))
        with pytest.raises(DefinitionError, match=r"Arguments do not fit step 0\.0"):
            app.start(pipeline, kwargs={"other": 1})
    app.start(pipeline, args=(3,))


def test_a_pipeline_refused_for_an_unknown_actor_starts_once_the_actor_is_declared(make_app: MakeApp) -> None:
    app = make_app()
    a = declare(app)
    pipeline = chain(
        step(a["count"]),
        step(
            dramatiq.Actor(
                lambda value: value,
                broker=make_app().broker,
                actor_name="later",
                queue_name="default",
                priority=0,
                options={},
            )
        ),
    )
    with pytest.raises(UnknownActor, match="'later'"):
        app.start(pipeline, args=(1,))

    @dramatiq.actor(broker=app.broker, actor_name="later")
    def later(value: int) -> int:
        return value

    app.start(pipeline, args=(1,))


def test_a_compiled_plan_checks_each_broker_it_starts_on(make_app: MakeApp) -> None:
    known, other = make_app(), make_app()
    a = declare(known)
    pipeline = chain(step(a["count"]), step(a["count"]))
    known.start(pipeline, args=(1,))

    with pytest.raises(UnknownActor, match="'count'"):
        other.start(pipeline, args=(1,))


SHOP = """
import dramatiq

import pipelines


@dramatiq.actor
def ship(order_id: int) -> None: ...


app = pipelines.configure()
app.register("shipping", pipelines.step(ship, 1))
"""


def test_an_actor_declared_before_configure_is_refused_with_the_order_to_change(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    (tmp_path / "shop.py").write_text(SHOP)

    started = subprocess.run(
        [sys.executable, "-c", "import shop; shop.app.run('shipping')"],
        env=environment(namespaces()),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )

    assert started.returncode == 1
    error = started.stderr.strip().splitlines()[-1]
    assert error.startswith("pipelines.errors.UnknownActor: Actor(s) 'ship' (shop.ship) are declared, but on another")
    assert "declared before pipelines.configure() ran" in error
    assert "Call pipelines.configure() before the actors are declared" in error


class _NotAnActor:
    """A module global that fails any check of what it is: a start that walks the loaded modules meets it."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise AssertionError("a start of known actors walked every loaded module's globals")


def test_a_new_pipeline_of_known_actors_starts_without_walking_the_loaded_modules(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    a = declare(app)
    trap = types.ModuleType("a_module_a_start_must_not_read")
    trap.value = _NotAnActor()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, trap.__name__, trap)

    runs = [app.start(chain(step(a["count"]), step(a["count"])), args=(n,)) for n in range(3)]

    assert len({run.id for run in runs}) == 3
