"""The wire format: strict JSON messages, decode errors that say what is wrong, JSON step results."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import pickle
import uuid
from typing import Any

import dramatiq
import pytest

from pipelines import options as opt
from pipelines.errors import DefinitionError
from pipelines.wire.codec import MalformedMessage, decode_message, decode_value, encode_message, encode_value
from tests.support.backends import Backend
from tests.support.fixtures import MakeApp


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Colour(enum.Enum):
    RED = 1


class Shade(enum.StrEnum):
    DARK = "dark"


class Size(enum.IntEnum):
    BIG = 3


FIELDS = {"queue_name", "actor_name", "args", "kwargs", "options", "message_id", "message_timestamp"}


def valid_fields() -> dict[str, Any]:
    return {
        "queue_name": "default",
        "actor_name": "charge",
        "args": [1],
        "kwargs": {},
        "options": {},
        "message_id": "m-1",
        "message_timestamp": 1_700_000_000_000,
    }


def body(**changes: Any) -> bytes:
    fields = valid_fields() | changes
    return json.dumps({k: v for k, v in fields.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    "message",
    [
        dramatiq.Message(
            queue_name="default",
            actor_name="charge",
            args=(42, "eur", None, 1.5, True, [1, 2], {"k": "v"}),
            kwargs={"retry": False, "tags": ["a", "b"]},
            options={opt.STEP: {"run": "r1", "node": "0.1", "up": [["c", "0", 1, 2]]}, opt.PIPELINE: "checkout"},
            message_id="0c5f0f6e-id",
            message_timestamp=1_700_000_000_123,
        ),
        dramatiq.Message(
            queue_name="",
            actor_name="",
            args=("shared",),
            kwargs={},
            options={opt.BRANCHES: {"ship": {"args": [1], "kwargs": {}, "options": {}}}},
        ),
        dramatiq.Message(
            queue_name="", actor_name="", args=({"order": 7},), kwargs={}, options={opt.EVENT_TOPIC: "o.p"}
        ),
    ],
    ids=["direct", "fan-out", "event"],
)
def test_a_message_survives_encoding_and_decoding(message: dramatiq.Message[Any]) -> None:
    decoded = decode_message(encode_message(message))
    assert decoded == message
    assert isinstance(decoded.args, tuple)


def test_a_message_is_encoded_as_a_json_object_of_dramatiq_fields() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="default", actor_name="charge", args=(1,), kwargs={}, options={}
    )
    data = json.loads(encode_message(message))
    assert set(data) == FIELDS
    assert data["args"] == [1]
    assert data["message_id"] == message.message_id


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"not json", "body is not JSON"),
        (b"", "body is not JSON"),
        (b"\xff\xfe{}", "body is not JSON"),
        (pickle.dumps({"a": 1}), "body is not JSON"),
        (pickle.dumps(valid_fields()), "body is not JSON"),
        (b"[1, 2]", "body is JSON list, not an object"),
        (b'"text"', "body is JSON str, not an object"),
        (b"null", "body is JSON NoneType, not an object"),
        (b"{}", "body lacks the field(s) queue_name, actor_name, args, kwargs, options, message_id, message_timestamp"),
        (body(message_id=...), "body lacks the field(s) message_id"),
        (body(args=..., options=...), "body lacks the field(s) args, options"),
        (body(queue_name=None), "field queue_name is NoneType, expected str"),
        (body(actor_name=5), "field actor_name is int, expected str"),
        (body(args="x"), "field args is str, expected list"),
        (body(args={"a": 1}), "field args is dict, expected list"),
        (body(kwargs=[]), "field kwargs is list, expected dict"),
        (body(options="o"), "field options is str, expected dict"),
        (body(message_id=1), "field message_id is int, expected str"),
        (body(message_timestamp="1700000000000"), "field message_timestamp is str, expected int"),
        (body(message_timestamp=1.5), "field message_timestamp is float, expected int"),
    ],
)
def test_a_body_that_is_not_a_json_message_is_malformed_and_says_why(payload: bytes, problem: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        decode_message(payload)
    assert problem in str(raised.value)


def test_the_not_json_error_shows_the_first_bytes_of_the_body() -> None:
    with pytest.raises(MalformedMessage, match=r"first bytes: b'\\x80"):
        decode_message(pickle.dumps({"a": 1}))


def test_a_boolean_timestamp_is_malformed() -> None:
    with pytest.raises(MalformedMessage, match="message_timestamp"):
        decode_message(body(message_timestamp=True))


def test_a_malformed_message_is_a_value_error() -> None:
    assert issubclass(MalformedMessage, ValueError)


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        object(),
        b"raw bytes",
        2**70,
        {1: "int key"},
        datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
        datetime.date(2026, 12, 1),
        uuid.UUID(int=7),
        decimal.Decimal("1.10"),
        Point(1, 2),
        Colour.RED,
    ],
    ids=[
        "set",
        "object",
        "bytes",
        "int-over-64-bits",
        "int-key",
        "datetime",
        "date",
        "uuid",
        "decimal",
        "dataclass",
        "enum",
    ],
)
def test_arguments_that_would_not_survive_a_json_round_trip_are_refused_naming_the_actor(value: object) -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="default", actor_name="charge", args=(value,), kwargs={}, options={}
    )
    with pytest.raises(DefinitionError, match="actor 'charge' has arguments that are not JSON"):
        encode_message(message)


def test_keyword_arguments_that_are_not_json_are_a_definition_error_naming_the_actor() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="default", actor_name="ship", args=(), kwargs={"to": object()}, options={}
    )
    with pytest.raises(DefinitionError, match="'ship'"):
        encode_message(message)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({opt.BRANCHES: {"ship": {}, "email": {}}}, "the fan-out to ship, email"),
        ({opt.EVENT_TOPIC: "order.placed"}, "event 'order.placed'"),
    ],
    ids=["fan-out", "event"],
)
def test_a_message_without_an_actor_is_named_by_what_it_is(options: dict[str, Any], named: str) -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="", actor_name="", args=({1, 2},), kwargs={}, options=options
    )
    with pytest.raises(DefinitionError, match=f"A message for {named} has arguments that are not JSON"):
        encode_message(message)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")], ids=repr)
def test_a_nan_or_infinite_argument_is_refused_not_sent_as_none(number: float) -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="charge", args=(1,), kwargs={"amounts": [1.5, {"total": number}]}, options={}
    )
    with pytest.raises(DefinitionError, match=r"actor 'charge' has a NaN or infinite number"):
        encode_message(message)
    assert encode_message(message.copy(kwargs={"amounts": [1.5, {"total": None}]}))  # None on purpose is fine


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -7, 2**63 - 1, 1.25, "", "text é", [], [1, "a", None], {}, {"a": [1, {"b": None}]}],
    ids=repr,
)
def test_a_step_result_survives_encode_value_and_decode_value(value: object) -> None:
    text = encode_value(value)
    assert isinstance(text, str)
    assert decode_value(text) == value


def test_a_datetime_argument_is_refused_at_send_with_what_to_do() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="remind", args=(), kwargs={"at": datetime.datetime.now(datetime.UTC)}, options={}
    )
    with pytest.raises(DefinitionError, match=r"kwargs\['at'\] is a datetime .*\.isoformat\(\)"):
        encode_message(message)


def test_str_and_int_enums_and_tuples_travel_as_their_json_values() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="paint", args=(Shade.DARK, Size.BIG, (1, 2)), kwargs={}, options={}
    )
    decoded = decode_message(encode_message(message))
    assert decoded.args == ("dark", 3, [1, 2])
    shade: object = decoded.args[0]
    size: object = decoded.args[1]
    assert shade == Shade.DARK
    assert size == Size.BIG


def test_a_step_result_that_is_a_datetime_is_refused() -> None:
    with pytest.raises(DefinitionError, match=r"the result\['at'\]\[0\] is a datetime"):
        encode_value({"at": [datetime.datetime.now(datetime.UTC)]})


def test_tuples_in_step_results_come_back_as_lists() -> None:
    assert decode_value(encode_value((1, (2, 3)))) == [1, [2, 3]]


@pytest.mark.parametrize("value", [object(), {1, 2}, b"bytes"], ids=["object", "set", "bytes"])
def test_a_step_result_that_is_not_json_is_a_definition_error(value: object) -> None:
    with pytest.raises(DefinitionError, match="not JSON"):
        encode_value(value)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"remind_at": datetime.datetime.now(datetime.UTC)}, r"options\['remind_at'\] is a datetime"),
        ({"ids": {1, 2}}, r"options\['ids'\] is a set"),
        ({"nested": {"at": [datetime.date(2026, 1, 1)]}}, r"options\['nested'\]\['at'\]\[0\] is a date"),
        ({"score": float("nan")}, r"options\['score'\] is nan"),
        ({"keys": {1: "a"}}, r"options\['keys'\] has the key 1"),
    ],
    ids=["datetime", "set", "nested-date", "nan", "int-key"],
)
def test_an_option_that_would_not_survive_a_json_round_trip_is_refused_naming_it(
    options: dict[str, Any], named: str
) -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="remind", args=(), kwargs={}, options=options
    )
    with pytest.raises(DefinitionError, match=f"actor 'remind' has an option that is not JSON: {named}"):
        encode_message(message)


def test_options_of_plain_json_values_and_tuples_travel() -> None:
    options = {"tags": ("a", "b"), "limits": {"n": 1, "f": 0.5, "on": True, "none": None}}
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="remind", args=(), kwargs={}, options=options
    )
    assert decode_message(encode_message(message)).options == {**options, "tags": ["a", "b"]}


@pytest.mark.parametrize(
    ("field", "value"),
    [("message_id", 7), ("queue_name", None), ("actor_name", b"remind"), ("message_timestamp", "now")],
)
def test_a_message_field_of_the_wrong_type_is_refused_naming_it(field: str, value: object) -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="remind", args=(), kwargs={}, options={}
    )
    with pytest.raises(DefinitionError, match=f"has {field}="):
        encode_message(message.copy(**{field: value}))


def test_a_datetime_option_is_refused_at_send_on_a_real_app(backend: Backend, make_app: MakeApp) -> None:
    app = make_app()

    @dramatiq.actor(broker=app.broker)
    def remind() -> None: ...

    with pytest.raises(DefinitionError, match=r"options\['remind_at'\] is a datetime"):
        remind.send_with_options(remind_at=datetime.datetime.now(datetime.UTC))
