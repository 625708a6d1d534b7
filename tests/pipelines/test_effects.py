"""The effect key names a message's effect the same way on every attempt, so actors can key effects."""

from __future__ import annotations

import threading

import dramatiq
import pytest

import pipelines
from pipelines import chain, step
from tests.support.fixtures import MakeApp, StartWorker


def test_the_effect_key_is_the_step_the_idempotency_key_or_the_message_id_and_survives_retries(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app(retries={"max_retries": 1})
    keys: dict[str, list[str]] = {}
    changed = threading.Condition()

    def seen(name: str) -> None:
        with changed:
            keys.setdefault(name, []).append(pipelines.current_effect_key())
            changed.notify_all()

    @dramatiq.actor(broker=app.broker, max_retries=1, min_backoff=1, max_backoff=1)
    def flaky(name: str) -> str:
        seen(name)
        if len(keys[name]) == 1:
            raise RuntimeError("first attempt fails")
        return name

    @dramatiq.actor(broker=app.broker, idempotency_key=lambda order_id: f"charge-{order_id}")
    def charge(order_id: int) -> None:
        seen("charge")

    run = app.start(chain(step(flaky, "step")))
    plain = flaky.send("plain")
    charge.send(7)
    start_worker(app)
    run.wait(timeout_s=30)
    with changed:
        changed.wait_for(lambda: len(keys.get("plain", [])) == 2 and bool(keys.get("charge")), timeout=30)

    assert keys["step"] == [f"{run.id}:0.0", f"{run.id}:0.0"]
    assert keys["plain"] == [plain.message_id, plain.message_id]
    assert keys["charge"] == ["charge:charge-7"]


def test_the_effect_key_outside_an_actor_is_an_error_saying_where_to_call_it() -> None:
    with pytest.raises(pipelines.NoEffectKey, match="call it from the actor"):
        pipelines.current_effect_key()
