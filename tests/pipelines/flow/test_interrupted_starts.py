"""A start interrupted before its first steps are published leaves no run pending: it is failed, with why.

On the embedded broker and store, then on RabbitMQ and Redis. The interruption is a Ctrl-C
(KeyboardInterrupt) raised where the start is slowest: while the store writes, and mid-publish.
"""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest

from pipelines import chain, for_each
from pipelines.app import App
from tests.support.fixtures import MakeApp


def _declare(app: App) -> dramatiq.Actor[Any, Any]:
    @dramatiq.actor(broker=app.broker)
    def inc(x: int) -> int:
        return x + 1

    return inc


def test_ctrl_c_mid_publish_fails_the_run_with_the_reason_and_the_id_was_handed_out_first(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    inc = _declare(app)
    created: list[tuple[str, bool]] = []

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(app.broker, "enqueue_many", interrupted)
    with pytest.raises(KeyboardInterrupt):
        app.start(chain(for_each(inc, range(50)), inc), on_created=lambda run_id, new: created.append((run_id, new)))

    [(run_id, new)] = created
    assert new is True
    status = app.get_run(run_id).status()
    assert (status.state, status.error, status.failed_step) == (
        "failed",
        "The run could not be started: interrupted",
        None,
    )
    assert [run.run_id for run in app.runs(state="pending").runs] == []
    assert [run.run_id for run in app.runs(state="failed").runs] == [run_id]


def test_ctrl_c_right_after_the_store_recorded_the_run_fails_it_too(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    inc = _declare(app)
    record = app.store.create_runs

    def recorded_then_interrupted(runs: Any) -> Any:
        record(runs)
        raise KeyboardInterrupt

    monkeypatch.setattr(app.store, "create_runs", recorded_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        app.start(chain(inc, inc), args=(1,))

    [run] = app.runs().runs
    assert (run.state, run.error, run.pipeline) == ("failed", "The run could not be started: interrupted", "inc")


def test_a_publish_error_other_than_the_brokers_own_also_fails_the_run(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    inc = _declare(app)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("connection reset by peer")

    monkeypatch.setattr(app.broker, "enqueue_many", broken)
    with pytest.raises(OSError, match="connection reset"):
        app.start(inc.message(1), name="one")

    [run] = app.runs(pipeline="one").runs
    assert (run.state, run.error) == ("failed", "The run could not be started: OSError: connection reset by peer")


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, BrokenPipeError])
def test_an_interruption_while_the_new_run_id_is_handed_out_fails_the_run_and_publishes_nothing(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch, interruption: type[BaseException]
) -> None:
    app = make_app()
    inc = _declare(app)
    published: list[Any] = []
    monkeypatch.setattr(app.broker, "enqueue_many", lambda messages, **options: published.extend(messages))
    handed_out: list[str] = []

    def print_id(run_id: str, new: bool) -> None:
        # What `pipelines run` does with the id: a Ctrl-C, or a reader that closed the pipe, stops it here.
        handed_out.append(run_id)
        raise interruption

    with pytest.raises(interruption):
        app.start(chain(inc, inc), args=(1,), name="printed", on_created=print_id)

    [run] = app.runs(pipeline="printed").runs
    assert run.run_id == handed_out[0]
    assert run.state == "failed"
    assert run.error == (
        "The run could not be started: interrupted"
        if interruption is KeyboardInterrupt
        else "The run could not be started: BrokenPipeError"
    )
    assert published == []
