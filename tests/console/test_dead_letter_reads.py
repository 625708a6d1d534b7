"""Reading dead letters never uses up a quorum queue's delivery limit (RabbitMQ 4.x sets one of 20).

The namespace's dead-letter queues get a policy with a delivery limit of 5, as an operator's policy (or
RabbitMQ 4.x's default) would set; the letters are then read 50 times through every way there is to
read them: the Python API, the CLI, the console's API and its pages.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import dramatiq
import httpx
import pika
import pytest

from pipelines import DeadLetterNotFound
from pipelines.app import App
from pipelines.broker import ExchangeBroker
from pipelines.dead_letters.reasons import DeadLetterReason
from pipelines.wire.codec import encode_message
from pipelines.wire.naming import dead_letter_queue
from tests.console.conftest import served_console
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp
from tests.support.housekeeping import rabbitmqctl
from tests.test_cli import environment, pipelines

pytestmark = only_on("rabbitmq")

DELIVERY_LIMIT = 5
READS = 50


@pytest.fixture
def limited(make_app: MakeApp) -> Iterator[App]:
    """An app whose dead-letter queues drop a message delivered more than ``DELIVERY_LIMIT`` times."""
    app = make_app(ui={"token": "t" * 32})
    # The example domain's actor, so that the `pipelines` CLI (which imports it) reads the same queues.
    dramatiq.actor(
        broker=app.broker, actor_name="charge_payment", queue_name="orders", profile="guaranteed", idempotency_key="-"
    )(lambda order_id, total: None)
    dramatiq.actor(broker=app.broker, actor_name="control")(lambda n, total: None)
    assert isinstance(app.broker, ExchangeBroker)
    app.broker.ensure_topology()
    policy = f"dead-limit-{app.settings.namespace}"
    pattern = f"^{app.settings.namespace}\\..*\\.dead$"
    limit = f'{{"delivery-limit": {DELIVERY_LIMIT}}}'
    ctl = [*rabbitmqctl(), "-q"]
    subprocess.run([*ctl, "set_policy", "--apply-to", "queues", policy, pattern, limit], check=True, timeout=30)
    try:
        yield app
    finally:
        subprocess.run([*ctl, "clear_policy", policy], check=True, timeout=30)


def dead_letter(app: App, actor: str, n: int, error: str = "") -> str:
    """Dead-letter a message to ``actor`` (with ``n`` for its first argument) as a worker does."""
    message = app.broker.get_actor(actor).message(n, 0)
    error = error or f"order {n}"
    reason = DeadLetterReason(
        reason="permanent error", error_type="ValueError", error=error, actor=actor, at=f"2026-01-0{n}"
    )
    queue = app.broker.topology.actor_queues[actor]
    app.broker.dead_letter(encode_message(message), message_id=message.message_id, reason=reason, queue=queue)
    return message.message_id


def test_the_policy_drops_a_letter_that_is_read_and_put_back_more_often_than_its_limit(limited: App) -> None:
    """What reading did before: basic.get, then the channel closes and the letter goes back."""
    dead = dead_letter_queue(limited.broker.topology.actor_queues["control"])
    dead_letter(limited, "control", 1)
    connection = pika.BlockingConnection(pika.URLParameters(limited.settings.broker.url))
    try:
        for _ in range(DELIVERY_LIMIT + 1):
            channel = connection.channel()
            channel.basic_get(dead, auto_ack=False)
            channel.close()
        assert connection.channel().queue_declare(dead, passive=True).method.message_count == 0
    finally:
        connection.close()


def test_dead_letters_read_fifty_times_every_way_are_all_still_there(limited: App) -> None:
    ids = [dead_letter(limited, "charge_payment", n) for n in (1, 2, 3)]
    env = environment(limited.settings.namespace)
    reads = 0

    def read(what: str, console: httpx.Client) -> None:
        nonlocal reads
        reads += 1
        if what == "python":
            assert [letter.id for letter in limited.dead_letters.list()] == ids
            with pytest.raises(DeadLetterNotFound):  # a replay reads every letter of every queue
                limited.dead_letters.replay("no-such-letter")
        elif what == "cli":
            listed = pipelines(env, "dlq", "list", "--queue", "charge_payment")
            shown = pipelines(env, "dlq", "show", ids[reads % 3])
            assert listed.returncode == shown.returncode == 0, listed.stderr + shown.stderr
            assert all(letter_id in listed.stdout for letter_id in ids)
        else:
            listing = console.get("/api/dead-letters")
            page = console.get("/dead-letters")
            one = console.get(f"/api/dead-letters/{ids[reads % 3]}")
            assert (listing.status_code, page.status_code, one.status_code) == (200, 200, 200)
            assert all(letter_id in page.text for letter_id in ids)

    with served_console(limited) as url, httpx.Client(base_url=url, timeout=30) as console:
        for n in range(READS):
            read("cli" if n % 25 == 24 else "api" if n % 12 == 11 else "python", console)

    assert [letter.id for letter in limited.dead_letters.list()] == ids
    connection = pika.BlockingConnection(pika.URLParameters(limited.settings.broker.url))
    try:
        channel = connection.channel()
        dead = dead_letter_queue(limited.broker.topology.actor_queues["charge_payment"])
        counts = [channel.basic_get(dead, auto_ack=True)[1].headers.get("x-delivery-count") for _ in ids]
    finally:
        connection.close()
    assert reads == READS
    assert counts == [0, 0, 0]  # as if never read


def test_what_a_dead_letter_says_is_shown_as_text_with_passwords_masked(limited: App) -> None:
    error = "got [/x] from redis://app:leak/pw@cache:6379/0 (timeout_s, or [worker] time_limit_s)"
    masked = "got [/x] from redis://app:***@cache:6379/0 (timeout_s, or [worker] time_limit_s)"
    letter_id = dead_letter(limited, "charge_payment", 1, error)
    env = environment(limited.settings.namespace)

    listed = pipelines(env, "dlq", "list")
    shown = pipelines(env, "dlq", "show", letter_id)
    as_json = pipelines(env, "dlq", "show", letter_id, "--json")
    with served_console(limited) as url, httpx.Client(base_url=url, timeout=30) as console:
        api = console.get(f"/api/dead-letters/{letter_id}").json()
        page = console.get(f"/dead-letters/{letter_id}").text

    assert (listed.returncode, shown.returncode, as_json.returncode) == (0, 0, 0), shown.stderr
    for text in (listed.stdout, shown.stdout, as_json.stdout, str(api), page):
        assert "leak/pw" not in text
    assert masked in shown.stdout
    assert masked in listed.stdout
    assert api["error"] == masked
    assert "got [/x] from redis://app:***@cache" in page
