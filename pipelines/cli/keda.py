"""`pipelines keda`: KEDA ScaledObjects generated from the topology: one RabbitMQ trigger per queue a worker consumes.

A worker Deployment serves some Dramatiq queues (its ``--queues``); each actor on them consumes one
RabbitMQ queue, or several for an ordered actor's partitions. KEDA scales on the largest of the
triggers, so every one of those queues gets a trigger: an actor added to a queue is watched as soon as
the manifest is generated again (``pipelines keda``), never forgotten in a hand-kept list.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from pipelines.app import App


@dataclass(frozen=True, kw_only=True)
class Scaling:
    """How one Deployment scales: bounds, the messages waiting per replica, the credentials to read them."""

    deployment: str
    value: int = 500
    min_replicas: int = 1
    max_replicas: int = 10
    authentication: str = "rabbit-pipelines-amqp"
    polling_interval_s: int = 15
    cooldown_s: int = 300


def watched_queues(
    actor_queues: Mapping[str, str], consume_queues: Mapping[str, Sequence[str]], served: Collection[str] = ()
) -> list[str]:
    """The RabbitMQ queues of the actors on the Dramatiq queues ``served`` (all of them when empty).

    Args:
        actor_queues: actor name → its Dramatiq queue name.
        consume_queues: actor name → the RabbitMQ queues it consumes (from the topology).
        served: Dramatiq queue names, as given to ``dramatiq --queues``.

    Raises:
        ConfigError: a served queue no actor uses.
    """
    unknown = sorted(set(served) - set(actor_queues.values()))
    if unknown:
        from pipelines.errors import ConfigError  # here: the CLI's --help stays light

        known = ", ".join(sorted(set(actor_queues.values())))
        raise ConfigError(f"No actor uses the queue(s) {', '.join(unknown)}; the app's queues are: {known}.")
    actors = [actor for actor, queue in actor_queues.items() if not served or queue in served]
    return sorted({name for actor in actors for name in consume_queues.get(actor, ())})


def scaled_object(scaling: Scaling, queues: Sequence[str]) -> str:
    """The ScaledObject of ``scaling.deployment`` watching ``queues``, as YAML (flow style where short)."""
    lines = [
        "apiVersion: keda.sh/v1alpha1",
        "kind: ScaledObject",
        "metadata:",
        f"  name: {_scalar(scaling.deployment)}",
        "spec:",
        "  scaleTargetRef:",
        f"    name: {_scalar(scaling.deployment)}",
        f"  pollingInterval: {scaling.polling_interval_s}",
        f"  cooldownPeriod: {scaling.cooldown_s}",
        f"  minReplicaCount: {scaling.min_replicas}",
        f"  maxReplicaCount: {scaling.max_replicas}",
        "  triggers:",
    ]
    for queue in queues:
        metadata = {"protocol": "amqp", "mode": "QueueLength", "value": str(scaling.value), "queueName": queue}
        lines += [
            "    - type: rabbitmq",
            "      metadata: {" + ", ".join(f"{key}: {_scalar(value)}" for key, value in metadata.items()) + "}",
            f"      authenticationRef: {{name: {_scalar(scaling.authentication)}}}",
        ]
    return "\n".join(lines) + "\n"


def _scalar(value: str) -> str:
    """A YAML scalar: plain when it reads back as the same string, else double-quoted (JSON's quoting)."""
    plain = value.replace(".", "").replace("-", "").replace("_", "").isalnum() and not value[:1].isdigit()
    return value if plain and value.lower() not in _YAML_WORDS else json.dumps(value)


#: Plain words YAML reads as something other than a string.
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def print_scaled_object(app: App, args: argparse.Namespace) -> int:
    """``pipelines keda``: the ScaledObject for the app's actors on ``--queues``, on stdout."""
    actor_queues = {name: actor.queue_name for name, actor in app.broker.actors.items()}
    queues = watched_queues(actor_queues, app.broker.topology.consume_queues, args.queues)
    scaling = Scaling(
        deployment=args.deployment,
        value=args.value,
        min_replicas=args.min,
        max_replicas=args.max,
        authentication=args.auth,
    )
    print(scaled_object(scaling, queues), end="")
    return 0
