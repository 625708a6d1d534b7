"""Both brokers screen what their queues hold with the same rule (``pipelines.broker.screening``).

Shapes of the fixed corpus are put raw into an actor's queue among valid messages, on the embedded
broker (straight into its memory queue) and on RabbitMQ (published to the actor's queue): each is
dead-lettered once, as ``malformed message`` naming what is wrong, without reaching the actor, and
every valid message runs once. A few seconds per backend.
"""

from __future__ import annotations

import orjson
import pytest

from pipelines.app import App
from pipelines.broker import MemoryBroker
from tests.support.backends import Backend
from tests.support.fail_closed.fail_closed_support import CORPUS, RawPublisher, body, declare_sink, wait_until
from tests.support.fixtures import MakeApp, StartWorker

SETTLE_S = 20
both_brokers = pytest.mark.parametrize("backend", ["memory", "rabbitmq"], indirect=True)

#: Shapes of the corpus that live in the body (memory queues hold bodies only, no headers), and that
#: carry the marker as their message id, plus two the corpus has not.
SHAPES = {
    **{
        name: CORPUS[name][::2]
        for name in (
            "branches not a mapping",
            "branch args not a list",
            "step not an address",
            "retries not a number",
            "eta not a number",
            "idempotency key not a string",
            "throws from the wire",
            "args not a list",
        )
    },
    "another actor's": (lambda m: body(m, actor="nobody"), "'nobody'"),
    "over the size limit": (lambda m: body(m, args=["x" * 2000]), "over broker.max_message_bytes"),
}


def put_raw(app: App, bodies: list[tuple[str, bytes]]) -> None:
    """Put bodies (with their message ids) into the queue of ``sink`` as any producer could."""
    if isinstance(app.broker, MemoryBroker):
        for _, raw in bodies:
            app.broker.queues["default"].put(raw)
        return
    publisher = RawPublisher()
    try:
        for message_id, raw in bodies:
            publisher.publish(app.broker.topology.actor_queues["sink"], raw, message_id=message_id)
    finally:
        publisher.close()


@both_brokers
def test_both_brokers_dead_letter_the_same_malformed_input_and_run_the_valid_messages_around_it(
    backend: Backend, make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = make_app(broker={"max_message_bytes": 1024})
    runs = declare_sink(app)
    bad = {f"bad{n}": name for n, name in enumerate(SHAPES)}
    valid = [f"ok{n}" for n in range(len(bad))]
    bodies = []
    for (marker, name), ok in zip(bad.items(), valid, strict=True):
        bodies += [(marker, SHAPES[name][0](marker)), (ok, body(ok))]
    put_raw(app, bodies)
    start_worker(app)

    wait_until(
        lambda: all(runs[m] for m in valid) and len(app.dead_letters.list()) >= len(bad),
        SETTLE_S,
        "every valid message run and every bad one dead-lettered",
    )

    letters = app.dead_letters.list()
    assert {m: runs[m] for m in valid} == dict.fromkeys(valid, 1)
    assert not any(runs[m] for m in bad)
    assert sorted(letter.id for letter in letters) == sorted(bad)
    for letter in letters:
        name = bad[letter.id]
        expected = "message too large" if name == "over the size limit" else "malformed message"
        assert (letter.reason.reason, letter.reason.actor) == (expected, "sink"), (name, letter.reason)
        assert SHAPES[name][1] in (letter.reason.error or ""), (name, letter.reason.error)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
@pytest.mark.parametrize("raw", [b"\x80not json", orjson.dumps([1, 2])], ids=["not JSON", "a JSON list"])
def test_an_embedded_dead_letter_of_a_body_without_a_message_id_gets_an_id_to_name_it_by(
    backend: Backend, make_app: MakeApp, start_worker: StartWorker, raw: bytes
) -> None:
    app = make_app()
    declare_sink(app)
    put_raw(app, [("", raw)])
    start_worker(app)

    wait_until(lambda: bool(app.dead_letters.list()), SETTLE_S, "the dead letter")

    [letter] = app.dead_letters.list()
    assert letter.id.startswith("unnamed-")
    assert letter.reason.reason == "malformed message"
    assert letter.message is None  # not replayable: nothing to decode
    assert app.dead_letters.show(letter.id).body == raw
