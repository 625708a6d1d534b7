"""`pipelines keda`: KEDA ScaledObjects generated from the topology: one RabbitMQ trigger per queue a worker consumes.

A worker Deployment serves some Dramatiq queues (its ``--queues``); each actor on them consumes one
RabbitMQ queue, or several for an ordered actor's partitions. KEDA scales on the largest of the
triggers, so every one of those queues gets a trigger: an actor added to a queue is watched as soon as
the manifest is generated again (``pipelines keda``), never forgotten in a hand-kept list.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipelines.errors import ConfigError

if TYPE_CHECKING:
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


def add_keda_parser(commands: Any) -> None:
    """``pipelines keda``'s arguments, on the CLI's subcommands."""
    keda: argparse.ArgumentParser = commands.add_parser(
        "keda",
        help="print a KEDA ScaledObject watching the queues of a worker Deployment",
        description="Print a KEDA ScaledObject with one RabbitMQ trigger per queue the actors on QUEUES consume.",
    )
    keda.add_argument("--deployment", required=True, help="the worker Deployment to scale")
    keda.add_argument("--queues", nargs="+", default=[], metavar="QUEUE", help="its `dramatiq --queues` (default all)")
    keda.add_argument("--value", type=int, default=500, help="messages waiting per replica (default 500)")
    keda.add_argument("--min", type=int, default=1, dest="min_replicas", help="fewest replicas (default 1)")
    keda.add_argument("--max", type=int, default=10, dest="max_replicas", help="most replicas (default 10)")
    keda.add_argument("--auth", default="rabbit-pipelines-amqp", help="the TriggerAuthentication with the AMQP URL")


def print_scaled_object(app: App, args: argparse.Namespace) -> int:
    """``pipelines keda``: the ScaledObject for the app's actors on ``--queues``, on stdout."""
    actor_queues = {name: actor.queue_name for name, actor in app.broker.actors.items()}
    queues = watched_queues(actor_queues, app.broker.topology.consume_queues, args.queues)
    scaling = Scaling(
        deployment=args.deployment,
        value=args.value,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        authentication=args.auth,
    )
    print(scaled_object(scaling, queues), end="")
    return 0
