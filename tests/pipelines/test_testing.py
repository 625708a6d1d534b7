"""The helpers users get for their own tests run a pipeline with no service at all."""

from __future__ import annotations

import dramatiq
import pytest

from pipelines import chain, fan_out
from pipelines.broker import MemoryBroker
from pipelines.testing import embedded_app, embedded_settings, running_worker


def test_an_embedded_app_and_worker_run_a_pipeline_to_completion() -> None:
    with embedded_app() as app:

        @dramatiq.actor(broker=app.broker)
        def parse(text: str) -> list[str]:
            return text.split()

        @dramatiq.actor(broker=app.broker)
        def count(words: list[str]) -> int:
            return len(words)

        @dramatiq.actor(broker=app.broker)
        def longest(words: list[str]) -> str:
            return max(words, key=len)

        with running_worker(app):
            status = app.start(chain(parse, fan_out(count, longest)), args=("rabbits pipe messages",)).wait(10)

    assert isinstance(app.broker, MemoryBroker)
    assert (status.state, status.result) == ("succeeded", [3, "messages"])


def test_embedded_settings_take_section_overrides_and_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINES_BROKER__URL", "amqp://elsewhere")

    settings = embedded_settings("unit", retries={"max_retries": 1})

    assert (settings.namespace, settings.broker.url, settings.store.url) == ("unit", "memory://", "memory://")
    assert settings.retries.max_retries == 1
