"""`pipelines keda`: the triggers come from the topology, every consumed queue of the served actors once."""

from __future__ import annotations

import dramatiq
import pytest
import yaml

from pipelines.cli.keda import Scaling, scaled_object, watched_queues
from pipelines.errors import ConfigError
from pipelines.testing import embedded_app


def test_an_ordered_actors_partitions_are_all_watched_and_other_queues_are_not() -> None:
    with embedded_app("shop") as app:

        @dramatiq.actor(broker=app.broker, queue_name="feeds", profile="ordered", ordering_key="user", partitions=3)
        def feed(user: str) -> None: ...

        @dramatiq.actor(broker=app.broker, queue_name="emails")
        def send(to: str) -> None: ...

        actor_queues = {name: actor.queue_name for name, actor in app.broker.actors.items()}
        watched = watched_queues(actor_queues, app.broker.topology.consume_queues, ["feeds"])
        everything = watched_queues(actor_queues, app.broker.topology.consume_queues)
        partitions = app.broker.topology.consume_queues["feed"]

        with pytest.raises(
            ConfigError, match="No actor uses the queue\\(s\\) nope; the app's queues are: emails, feeds"
        ):
            watched_queues(actor_queues, app.broker.topology.consume_queues, ["feeds", "nope"])

    assert len(partitions) == 3
    assert watched == sorted(partitions)
    # Every queue, the run deadline check's too (a system actor, served by workers without --queues).
    system = app.broker.topology.consume_queues["pipelines_run_deadline"]
    assert set(everything) == {*partitions, *app.broker.topology.consume_queues["send"], *system}
    document = yaml.safe_load(scaled_object(Scaling(deployment="true", value=7), watched))
    assert document["metadata"]["name"] == "true"  # quoted where YAML would read another type
    assert [t["metadata"]["queueName"] for t in document["spec"]["triggers"]] == watched
    assert {t["metadata"]["value"] for t in document["spec"]["triggers"]} == {"7"}
