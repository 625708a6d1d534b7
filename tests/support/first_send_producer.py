"""A producer in a process of its own, for the max_age test: the app from PIPELINES_*, actor ``prompt``
with ``max_age=100`` and as many actors as its one argument says whose queues are new to RabbitMQ. Its
first send declares all their queues; it prints one JSON line, ``declared_ms``: how long that declaring
took, inside the send."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import dramatiq

from pipelines.app import configure
from pipelines.broker import ExchangeBroker

MAX_AGE_MS = 100


def nothing(*args: Any) -> None:
    """Never runs here: this process only sends."""


def main(new_queues: int) -> None:
    app = configure()
    prompt = dramatiq.actor(actor_name="prompt", broker=app.broker, max_age=MAX_AGE_MS)(nothing)
    for n in range(new_queues):
        dramatiq.actor(actor_name=f"elsewhere_{n}", broker=app.broker)(nothing)
    broker = app.broker
    assert isinstance(broker, ExchangeBroker), "a producer on RabbitMQ"
    declare = broker.ensure_topology
    took_s: list[float] = []

    def timed_declare() -> None:
        started = time.monotonic()
        declare()
        took_s.append(time.monotonic() - started)

    broker.ensure_topology = timed_declare  # type: ignore[method-assign]
    prompt.send("first")  # the broker declares the whole topology, then publishes
    print(json.dumps({"declared_ms": took_s[0] * 1000}), flush=True)
    app.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))
