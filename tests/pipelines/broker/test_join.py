"""``broker.join()`` waits for what waits in the delay tiers too: retries and delayed sends."""

from __future__ import annotations

import dramatiq

from pipelines.broker import ExchangeBroker
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, StartWorker

pytestmark = only_on("rabbitmq")


def test_a_delayed_message_is_counted_as_delayed_until_it_is_due(make_app: MakeApp) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    later = dramatiq.actor(actor_name="later", broker=app.broker)(lambda: None)

    later.send_with_options(delay=30_000)

    assert app.broker.get_queue_message_counts("default") == (0, 1, 0)


def test_join_returns_only_after_a_retry_waiting_in_a_delay_tier_ran(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app()
    assert isinstance(app.broker, ExchangeBroker)
    attempts: list[int] = []

    @dramatiq.actor(broker=app.broker, max_retries=1)
    def second_time_lucky() -> None:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise dramatiq.Retry(delay=1000)

    start_worker(app)
    second_time_lucky.send()
    app.broker.join("default", min_successes=3, timeout=30_000)

    assert attempts == [1, 2]
