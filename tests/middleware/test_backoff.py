"""Retries: exponential backoff with full jitter, a cap, a maximum; permanent errors never retried."""

from __future__ import annotations

import random
import re
from typing import Any

import dramatiq
import pydantic
import pytest

from pipelines.errors import ConfigError, DefinitionError, InvalidActorOption, PublishError
from pipelines.middleware import Backoff
from pipelines.middleware.backoff import import_exceptions
from tests.support.fixtures import MakeApp, Observe, StartWorker


def backoff(max_retries: int = 5, min_ms: int = 100, max_ms: int = 5000) -> Backoff:
    return Backoff(max_retries=max_retries, min_backoff_ms=min_ms, max_backoff_ms=max_ms, permanent=())


@pytest.mark.parametrize(("retries", "bound"), [(0, 100), (1, 200), (3, 800), (5, 3200), (6, 5000), (40, 5000)])
def test_each_delay_is_drawn_from_zero_to_the_capped_exponential_bound(retries: int, bound: int) -> None:
    random.seed(retries)
    delays = [backoff().delay_ms(retries, 100, 5000) for _ in range(500)]

    assert all(1 <= d <= bound for d in delays)
    # Full jitter spreads over the whole range, not over [bound, 2 * bound] as Dramatiq's own jitter.
    assert min(delays) < bound * 0.1
    assert max(delays) > bound * 0.9


def test_permanent_errors_are_read_from_dotted_names_and_bad_names_are_config_errors() -> None:
    assert import_exceptions(["pydantic.ValidationError", "builtins.KeyError"]) == (pydantic.ValidationError, KeyError)
    with pytest.raises(ConfigError, match=r"'nowhere\.Error' does not import"):
        import_exceptions(["nowhere.Error"])
    with pytest.raises(ConfigError, match=r"'json\.dumps' is not an exception class"):
        import_exceptions(["json.dumps"])


def test_a_handler_that_always_fails_runs_max_retries_plus_one_times_then_one_dead_letter(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    observer = observe(app)
    chosen: list[tuple[int, int]] = []
    draw = Backoff.delay_ms

    def recording(self: Backoff, retries: int, min_ms: int, max_ms: int) -> int:
        delay = draw(self, retries, min_ms, max_ms)
        chosen.append((retries, delay))
        return delay

    monkeypatch.setattr(Backoff, "delay_ms", recording)
    attempts: list[int] = []

    @dramatiq.actor(broker=app.broker, max_retries=3, min_backoff=20, max_backoff=60)
    def always_fails(n: int) -> None:
        attempts.append(n)
        raise ConnectionError(f"downstream refused {n}")

    start_worker(app)
    always_fails.send(7)
    observer.wait_dead_lettered("always_fails", 1)

    assert attempts == [7, 7, 7, 7]
    assert [retries for retries, _ in chosen] == [0, 1, 2]
    assert all(1 <= delay <= min(60, 20 * 2**retries) for retries, delay in chosen)
    [letter] = app.dead_letters.list("always_fails")
    assert (letter.reason.reason, letter.reason.attempts) == ("retries exhausted", 4)
    assert (letter.reason.error_type, letter.reason.error) == ("ConnectionError", "downstream refused 7")
    assert "downstream refused 7" in (letter.reason.traceback or "")


class Order(pydantic.BaseModel):
    order_id: int


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({}, "validation"),
        ({"throws": (KeyError,)}, "key"),
        ({"retry_when": lambda retries, e: not isinstance(e, LookupError)}, "lookup"),
        ({}, "definition"),
    ],
    ids=["validation-error-by-default", "throws", "retry_when", "definition-error-by-default"],
)
def test_permanent_errors_are_dead_lettered_at_once_without_retry(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, options: dict[str, Any], error: str
) -> None:
    app = make_app(retries={"max_retries": 5})
    observer = observe(app)
    attempts: list[str] = []

    @dramatiq.actor(broker=app.broker, **options)
    def strict(kind: str) -> None:
        attempts.append(kind)
        if kind == "validation":
            Order.model_validate({"order_id": "not a number"})
        if kind == "key":
            raise KeyError("missing")
        if kind == "lookup":
            raise IndexError("out of range")
        raise DefinitionError("bad definition")

    start_worker(app)
    strict.send(error)
    observer.wait_dead_lettered("strict", 1)

    assert attempts == [error]
    [letter] = app.dead_letters.list("strict")
    assert (letter.reason.reason, letter.reason.attempts) == ("permanent error", 1)


def test_a_retry_that_cannot_be_enqueued_is_dead_lettered_not_lost(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(retries={"max_retries": 3})
    observer = observe(app)
    publish = app.broker.enqueue

    def refuse_delayed(message: dramatiq.Message[Any], *, delay: int | None = None) -> Any:
        if delay:
            raise PublishError("broker refused the retry")
        return publish(message, delay=delay)

    monkeypatch.setattr(app.broker, "enqueue", refuse_delayed)

    @dramatiq.actor(broker=app.broker)
    def wobbly() -> None:
        raise ConnectionError("nope")

    start_worker(app)
    wobbly.send()
    observer.wait_dead_lettered("wobbly", 1)

    [letter] = app.dead_letters.list("wobbly")
    assert letter.reason.reason == "retry could not be scheduled"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retries": -1}, "max_retries=-1 must be a whole number >= 0"),
        ({"max_retries": 2.5}, "max_retries=2.5 must be a whole number"),
        ({"min_backoff": -1}, "min_backoff=-1 must be a whole number >= 0"),
        ({"throws": "ValueError"}, "throws='ValueError' must be an exception class"),
        ({"retry_when": 3}, "retry_when must be a function"),
        ({"timeout_s": "soon"}, "timeout_s='soon' must be a positive number"),
        ({"timeout_s": -1}, "timeout_s=-1 must be a positive number"),
        ({"idempotency_key": 42}, "idempotency_key=42 must be a string or a function"),
    ],
)
def test_invalid_actor_options_are_refused_when_the_actor_is_declared(
    make_app: MakeApp, options: dict[str, Any], message: str
) -> None:
    app = make_app()

    with pytest.raises(InvalidActorOption, match=re.escape(message)):
        dramatiq.actor(actor_name="picky", broker=app.broker, **options)(lambda: None)
    assert "picky" not in app.broker.actors
