"""What both brokers share: the protocol the runtime and middleware use of them."""

from __future__ import annotations

import pytest
from dramatiq.brokers.stub import StubBroker

from pipelines.broker import PipelineBroker, pipeline_broker
from pipelines.errors import DefinitionError
from pipelines.testing import embedded_app


def test_a_middleware_hook_gets_our_broker_as_the_pipeline_broker_it_is() -> None:
    with embedded_app() as app:
        ours: PipelineBroker = app.broker  # checked by mypy: both brokers implement the protocol

        assert pipeline_broker(app.broker) is ours


def test_a_plain_dramatiq_broker_is_refused_with_what_to_do() -> None:
    with pytest.raises(DefinitionError, match=r"not a StubBroker: build the broker with pipelines.configure\(\)"):
        pipeline_broker(StubBroker())
