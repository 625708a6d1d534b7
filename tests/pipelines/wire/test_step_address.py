"""A step address is parsed once per option value a thread reads, and a local step's is never parsed."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest

from pipelines import options as opt
from pipelines.wire.steps import Frame, MalformedStepAddress, StepAddress

UP = (Frame("c", "0", 1, 3),)


def _message(option: Any) -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={opt.STEP: option})


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    parsed: list[object] = []
    parse = StepAddress.from_option.__func__  # type: ignore[attr-defined]

    def counted(cls: type[StepAddress], value: object) -> StepAddress:
        parsed.append(value)
        address: StepAddress = parse(cls, value)
        return address

    monkeypatch.setattr(StepAddress, "from_option", classmethod(counted))
    return parsed


def test_an_option_made_from_a_known_address_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting_parses(monkeypatch)
    address = StepAddress("run-1", "0.1", UP)
    option = address.to_option()
    address.remember(option)

    assert StepAddress.of(_message(option)) is address
    assert parsed == []


def test_the_step_before_keeps_its_parsed_address_once_the_next_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting_parses(monkeypatch)
    finishing = _message(StepAddress("run-1", "0.0", (Frame("c", "0", 0, 3),)).to_option())
    first = StepAddress.of(finishing)
    following = StepAddress("run-1", "0.1", UP)
    following.remember(following.to_option())

    assert StepAddress.of(finishing) is first
    assert len(parsed) == 1


def test_an_equal_option_that_is_another_object_is_parsed_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting_parses(monkeypatch)
    address = StepAddress("run-1", "0.1", UP)
    address.remember(address.to_option())
    tampered = {**address.to_option(), "node": "not a step id"}

    assert StepAddress.of(_message(address.to_option())) == address
    with pytest.raises(MalformedStepAddress):
        StepAddress.of(_message(tampered))
    assert len(parsed) == 2
