"""Typed payloads with schema versions, and encrypted payloads: validated, upgraded, sealed."""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import orjson
import pika
import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel, Field

from pipelines import chain, step
from pipelines import options as opt
from pipelines.app import App
from pipelines.errors import InvalidActorOption
from pipelines.payloads.typed import InvalidArguments, InvalidPayload
from pipelines.wire.naming import run_key
from tests.support.backends import only_on
from tests.support.fixtures import MakeApp, Observe, StartWorker

rabbitmq_only = only_on("rabbitmq")
OLD_KEY, NEW_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()


class ChargeV1(BaseModel):
    order_id: int
    amount: float


class ChargeV2(BaseModel):
    order_id: int
    amount_cents: int = Field(ge=0)
    currency: str


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": data["order_id"], "amount_cents": round(data["amount"] * 100), "currency": "EUR"}


def test_arguments_are_validated_at_enqueue_and_travel_as_the_models_json(make_app: MakeApp) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker, payload=ChargeV2, schema_version=2)
    def charge(request: ChargeV2) -> None: ...

    sent = [
        charge.send(ChargeV2(order_id=1, amount_cents=500, currency="EUR")),
        charge.send_with_options(args=({"order_id": 2, "amount_cents": 700, "currency": "USD"},)),
        charge.send_with_options(kwargs={"order_id": 3, "amount_cents": 900, "currency": "GBP"}),
    ]

    assert [m.args for m in sent] == [
        ({"order_id": 1, "amount_cents": 500, "currency": "EUR"},),
        ({"order_id": 2, "amount_cents": 700, "currency": "USD"},),
        ({"order_id": 3, "amount_cents": 900, "currency": "GBP"},),
    ]
    assert {m.options[opt.SCHEMA_VERSION] for m in sent} == {2}
    with pytest.raises(InvalidPayload, match=r"amount_cents: Input should be greater than or equal to 0"):
        charge.send_with_options(args=({"order_id": 4, "amount_cents": -1, "currency": "EUR"},))
    with pytest.raises(InvalidPayload, match=r"currency: Field required"):
        charge.send_with_options(kwargs={"order_id": 5, "amount_cents": 1})


def test_an_event_is_checked_against_its_typed_subscribers_when_published(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app()
    received: list[Any] = []

    @dramatiq.actor(broker=app.broker, subscribe=["order.*"], payload=ChargeV1)
    def on_order(event: ChargeV1) -> None:
        received.append(event)

    @dramatiq.actor(broker=app.broker, subscribe=["order.#"])
    def audit(event: dict[str, Any]) -> None: ...

    with pytest.raises(InvalidPayload, match=r"Payload of actor 'on_order' is invalid: amount: Field required"):
        app.publish("order.placed", {"order_id": 1})
    observer = observe(app)
    start_worker(app)
    app.publish("order.placed", {"order_id": 2, "amount": 9.5})
    observer.wait_handled("on_order", 1)
    observer.wait_handled("audit", 1)

    assert received == [ChargeV1(order_id=2, amount=9.5)]  # the refused event reached nobody


@only_on("memory")
@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"payload": dict}, r"payload=<class 'dict'> must be a pydantic model class"),
        ({"schema_version": 2}, r"schema_version need payload="),
        ({"payload": ChargeV2, "schema_version": 3, "upgrades": {1: v1_to_v2}}, r"no function for version\(s\) \[2\]"),
        ({"payload": ChargeV2, "encrypt": True}, r"encrypts its payload, but \[encryption\] keys is empty"),
    ],
)
def test_payload_declarations_that_cannot_work_are_refused(
    make_app: MakeApp, options: dict[str, Any], complaint: str
) -> None:
    app = make_app()
    with pytest.raises(InvalidActorOption, match=complaint):
        dramatiq.actor(broker=app.broker, actor_name="charge", **options)(lambda request: None)


@rabbitmq_only
def test_a_rolling_upgrade_v2_workers_process_the_v1_messages_left_in_the_queue(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    old = make_app()  # the v1 producer (and its workers, now gone)
    v1 = dramatiq.actor(broker=old.broker, actor_name="charge", payload=ChargeV1)(lambda request: None)
    for n in range(5):
        v1.send({"order_id": n, "amount": n + 0.5})
    new = make_app(namespace=old.settings.namespace)
    observer = observe(new)
    received: list[ChargeV2] = []

    @dramatiq.actor(broker=new.broker, payload=ChargeV2, schema_version=2, upgrades={1: v1_to_v2})
    def charge(request: ChargeV2) -> None:
        received.append(request)

    charge.send(ChargeV2(order_id=9, amount_cents=1, currency="USD"))  # a v2 message among them
    start_worker(new)
    observer.wait_handled("charge", 6)

    assert sorted(r.order_id for r in received) == [0, 1, 2, 3, 4, 9]
    assert all(isinstance(r, ChargeV2) for r in received)
    assert next(r for r in received if r.order_id == 3).amount_cents == 350
    assert new.dead_letters.list() == []


def test_a_message_that_does_not_validate_at_processing_is_dead_lettered_once_with_the_error(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app(retries={"max_retries": 3})
    observer = observe(app)
    runs: list[ChargeV2] = []

    @dramatiq.actor(broker=app.broker, payload=ChargeV2, schema_version=2)
    def charge(request: ChargeV2) -> None:
        runs.append(request)

    # What an outdated producer without validation would send: the wrong shape, stamped version 2.
    bad: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="default",
        actor_name="charge",
        args=({"order_id": "not a number"},),
        kwargs={},
        options={opt.SCHEMA_VERSION: 2},
    )
    app.broker.enqueue(bad)
    start_worker(app)
    observer.wait_dead_lettered("charge", 1)

    [letter] = app.dead_letters.list()
    assert runs == []
    assert observer.handled == {"charge": 1}  # not retried
    assert letter.reason.reason == "invalid payload"
    assert "order_id: Input should be a valid integer" in (letter.reason.error or "")


@rabbitmq_only  # two apps share queues only through RabbitMQ
def test_arguments_an_actor_cannot_take_are_refused_at_send_and_dead_lettered_once_in_the_worker(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    old = make_app()  # a producer still on the old signature
    dramatiq.actor(broker=old.broker, actor_name="resize")(lambda image, width, height: None)
    old.broker.get_actor("resize").send("a.jpg", 64, 64)
    new = make_app(namespace=old.settings.namespace, retries={"max_retries": 3})
    observer = observe(new)

    @dramatiq.actor(broker=new.broker)
    def resize(image: str, size: int) -> None: ...

    with pytest.raises(InvalidArguments, match=r"Actor 'resize' cannot take these arguments: too many positional"):
        resize.send_with_options(args=("b.jpg", 64, 64))  # what a type checker would flag
    start_worker(new)
    observer.wait_dead_lettered("resize", 1)

    [letter] = new.dead_letters.list()
    assert observer.handled == {"resize": 1}  # not retried: it would fail the same way every time
    assert letter.reason.reason == "invalid arguments"
    assert "too many positional arguments" in (letter.reason.error or "")


def test_a_message_newer_than_the_worker_waits_for_an_upgraded_worker(make_app: MakeApp) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker, payload=ChargeV1)
    def charge(request: ChargeV1) -> None: ...

    from pipelines.payloads.typed import NewerPayload, from_wire

    with pytest.raises(NewerPayload, match=r"knows schema version 1, the message is version 2"):
        from_wire(charge, ({"order_id": 1, "amount_cents": 1, "currency": "EUR"},), 2)


class Card(BaseModel):
    holder: str
    card_number: str


def secret_app(make_app: MakeApp, keys: list[str]) -> App:
    return make_app(encryption={"keys": keys})


@rabbitmq_only
def test_secrets_are_unreadable_in_rabbitmq_and_redis_and_opened_for_the_actor(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = secret_app(make_app, [NEW_KEY])
    observer = observe(app)
    seen: list[Any] = []
    lock = threading.Lock()

    @dramatiq.actor(broker=app.broker, payload=Card, secret_fields=["card_number"])
    def tokenize(card: Card) -> dict[str, str]:
        with lock:
            seen.append(card)
        return {"token": f"tok-{card.card_number[-4:]}", "pan": card.card_number}

    @dramatiq.actor(broker=app.broker, encrypt=True)
    def store_pan(pan: str, note: str = "") -> str:
        return pan[-4:]

    tokenize.send(Card(holder="Ada", card_number="4111111111111111"))
    store_pan.send("5500005555555559", note="vip")
    raw = _raw_bodies(app, ["tokenize", "store_pan"])
    run = app.start(chain(step(store_pan, "340000000000009")))

    start_worker(app)
    observer.wait_handled("tokenize", 1)
    observer.wait_handled("store_pan", 2)
    assert run.result(timeout_s=30) == "0009"

    record = _raw_run(app, run.id)
    assert all(b"4111111111111111" not in body and b"5500005555555559" not in body for body in raw)
    assert b"Ada" in raw[0]  # only the secret field is sealed
    assert b'"$sealed"' in raw[0]
    assert b"vip" not in raw[1]  # the whole argument list is sealed
    assert b'"$sealed"' in record  # the encrypting actor's result is stored sealed
    # Neither its input nor its result as JSON ("0009" alone may turn up in a timestamp or an id).
    assert b"340000000000009" not in record
    assert b'"0009"' not in record
    assert seen[0].card_number == "4111111111111111"


@rabbitmq_only
def test_the_bound_secrets_of_a_later_step_are_sealed_in_the_run_store_and_opened_for_its_actor(
    make_app: MakeApp, start_worker: StartWorker
) -> None:
    app = secret_app(make_app, [NEW_KEY])
    seen: list[tuple[str, Any]] = []

    @dramatiq.actor(broker=app.broker)
    def amount(x: int) -> int:
        return x * 2

    @dramatiq.actor(broker=app.broker, encrypt=True)
    def store_pan(pan: str, total: int) -> str:
        seen.append((pan, total))
        return pan[-4:]

    @dramatiq.actor(broker=app.broker, secret_fields=["card_number"])
    def charge(last4: str, card_number: str = "", holder: str = "") -> str:
        seen.append((card_number, last4))
        return holder

    start_worker(app)
    # The plan keeps the arguments bound to steps 2 and 3 in the run store until they run.
    run = app.start(
        chain(
            step(amount, 21),
            step(store_pan, "340000000000009"),
            step(charge, card_number="5500005555555559", holder="Ada"),
        )
    )

    assert run.result(timeout_s=30) == "Ada"
    assert seen == [("340000000000009", 42), ("5500005555555559", "0009")]
    record = _raw_run(app, run.id)
    assert b"340000000000009" not in record
    assert b"5500005555555559" not in record
    assert b'"holder":"Ada"' in record  # only what the actor marks secret is sealed


def _raw_bodies(app: Any, actors: list[str]) -> list[bytes]:
    """The bodies waiting in the actors' queues, read with pika and left in place."""
    connection = pika.BlockingConnection(pika.URLParameters(app.settings.broker.url))
    channel = connection.channel()
    bodies = []
    for actor in actors:
        _, _, body = channel.basic_get(app.broker.topology.actor_queues[actor], auto_ack=False)
        bodies.append(body)
    connection.close()  # unacknowledged: back in their queues
    return bodies


def _raw_run(app: Any, run_id: str) -> bytes:
    import redis

    client: Any = redis.Redis.from_url(app.settings.store.url)
    key = run_key(app.settings.namespace, run_id)
    values = [*client.hgetall(key).values(), *client.hgetall(key + ":steps").values()]
    for kept in (":results", ":starts", ":inputs"):  # inputs: what the stall sweep would publish again
        values += [*client.hgetall(key + kept).values()]
    return b"\n".join(values)


@rabbitmq_only
def test_a_tampered_message_is_dead_lettered_and_rotated_keys_still_open_old_messages(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    old = secret_app(make_app, [OLD_KEY])
    dramatiq.actor(broker=old.broker, actor_name="store_pan", encrypt=True)(lambda pan: None)
    old.broker.get_actor("store_pan").send("5500005555555559")  # sealed with the old key
    new = make_app(namespace=old.settings.namespace, encryption={"keys": [NEW_KEY, OLD_KEY]})
    observer = observe(new)
    opened: list[str] = []
    dramatiq.actor(broker=new.broker, actor_name="store_pan", encrypt=True)(opened.append)
    tampered = new.broker.get_actor("store_pan").message("4111111111111111")
    sealed = new.broker.outbound.prepare(new.broker.actors, [tampered])[0][0]
    token = sealed.options[opt.SEALED]
    forged = sealed.copy(options={opt.SEALED: token[:-8] + ("A" if token[-8] != "A" else "B") + token[-7:]})
    _publish_raw(new, forged)

    start_worker(new)
    observer.wait_handled("store_pan", 2)
    observer.wait_dead_lettered("store_pan", 1)

    assert opened == ["5500005555555559"]
    [letter] = new.dead_letters.list()
    assert letter.reason.reason == "undecryptable"
    assert b"4111111111111111" not in letter.body


def _publish_raw(app: Any, message: dramatiq.Message[Any]) -> None:
    """Publish a body as it is, past our broker's outbound checks (what an attacker could do)."""
    app.broker.ensure_topology()
    connection = pika.BlockingConnection(pika.URLParameters(app.settings.broker.url))
    body = orjson.dumps({**message.asdict(), "args": list(message.args)})
    connection.channel().basic_publish(app.broker.topology.work_exchange, message.actor_name, body)
    connection.close()


def test_a_sealed_value_opens_only_for_the_actor_and_field_it_was_sealed_for_or_in_its_run(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = secret_app(make_app, [NEW_KEY])
    observer = observe(app)
    echoed: list[Any] = []

    @dramatiq.actor(broker=app.broker, encrypt=True)
    def store_pan(pan: str) -> str:
        return pan[-4:]

    @dramatiq.actor(broker=app.broker, secret_fields=["card_number"])
    def charge(card_number: str = "", note: str = "") -> str:
        echoed.append(note)
        return note

    @dramatiq.actor(broker=app.broker)
    def just_echo(x: Any = None, *rest: Any) -> Any:
        echoed.append(x)
        return x

    prepare = app.broker.outbound.prepare
    [(whole, _)] = prepare(app.broker.actors, [store_pan.message("4111111111111111")])
    [(field, _)] = prepare(app.broker.actors, [charge.message(card_number="5500005555555559")])
    whole_token = {"$sealed": whole.options[opt.SEALED]}
    field_token = field.kwargs["card_number"]
    start_worker(app)
    sealed_result = _stored_result(app.start(chain(step(store_pan, "340000000000009"))))

    misplaced = [
        just_echo.message(whole_token),  # another actor
        charge.message(note=field_token),  # the same actor, another field
        just_echo.message(field_token),
        just_echo.message(sealed_result),  # a run's sealed result, outside any run
    ]
    for message in misplaced:  # sent as any producer can
        app.broker.enqueue(message)
    other_run = app.start(chain(step(just_echo, sealed_result)))  # ... and in another run

    observer.wait_dead_lettered("just_echo", 4)
    observer.wait_dead_lettered("charge", 1)
    assert other_run.wait(30).state == "failed"
    assert echoed == []
    letters = app.dead_letters.list()
    assert len(letters) == 5
    assert {letter.reason.reason for letter in letters} == {"undecryptable"}
    assert all("sealed for somewhere else" in (letter.reason.error or "") for letter in letters)


def _stored_result(run: Any) -> Any:
    """The result of a run's last step as the run store keeps it (sealed, when its actor encrypts)."""
    status = run.wait(30)
    assert status.state == "succeeded"
    return status.result
