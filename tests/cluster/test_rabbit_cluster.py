"""The local RabbitMQ cluster is a real one: one cluster of three nodes, quorum queues replicated on all
three, a node's SIGKILL survived by confirmed messages, a cut-off node that stops serving and comes back.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support.cluster.local_rabbit import GLOBAL_HANG, RabbitCluster, RabbitNode
from tests.support.cluster.local_slot import wait_for

pytestmark = pytest.mark.cluster

#: The open-file limit a node gets from Debian's wrapper (``su`` resets it to 1,024): 927 handles.
WRAPPER_HANDLE_LIMIT = 927


def connect(node: RabbitNode) -> Any:
    return pika.BlockingConnection(pika.URLParameters(f"{node.url}?connection_attempts=3&retry_delay=1"))


def publish_confirmed(node: RabbitNode, queue: str, bodies: list[bytes]) -> None:
    """Publish with publisher confirms: returns only once the cluster has confirmed every message."""
    with connect(node) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)


def publish_once_a_leader_confirms(node: RabbitNode, queue: str, body: bytes, timeout: float = 60) -> None:
    """Publish ``body`` until the cluster confirms it: right after a leader dies, the queue nacks what it
    cannot yet store (no new leader elected), and a nacked message was not enqueued."""

    def confirmed() -> bool:
        try:
            publish_confirmed(node, queue, [body])
        except pika.exceptions.NackError:
            return False
        return True

    wait_for(confirmed, f"{queue} to confirm a publish (a new leader elected)", timeout)


def drain(node: RabbitNode, queue: str) -> list[bytes]:
    """Take every ready message of ``queue`` (acknowledged) through ``node``."""
    taken: list[bytes] = []
    with connect(node) as connection:
        channel = connection.channel()
        while True:
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return taken
            taken.append(body)


@pytest.fixture
def quorum_queues(rabbit_cluster: RabbitCluster) -> Iterator[list[str]]:
    """Names for quorum queues the test declares; every one is deleted afterwards."""
    names = [f"cluster-smoke-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    yield names
    rabbit_cluster.ensure_healthy()
    with connect(rabbit_cluster.nodes[0]) as connection:
        channel = connection.channel()
        for name in names:
            channel.queue_delete(name)


def declare_quorum(node: RabbitNode, names: list[str]) -> None:
    with connect(node) as connection:
        channel = connection.channel()
        for name in names:
            arguments = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
            channel.queue_declare(name, durable=True, arguments=arguments)


def test_the_three_nodes_form_one_cluster_with_raised_file_limits(rabbit_cluster: RabbitCluster) -> None:
    names = {node.name for node in rabbit_cluster.nodes}
    assert len(names) == 3
    for node in rabbit_cluster.nodes:
        assert rabbit_cluster.running_nodes(via=node) == names
        status = json.loads(rabbit_cluster.ctl(node, "status", "--formatter", "json"))
        assert status["file_descriptors"]["total_limit"] > 10 * WRAPPER_HANDLE_LIMIT
    assert len(set(rabbit_cluster.urls)) == 3


def test_quorum_queues_keep_their_confirmed_messages_when_the_busiest_node_is_killed_then_another_stopped(
    rabbit_cluster: RabbitCluster, quorum_queues: list[str]
) -> None:
    declare_quorum(rabbit_cluster.nodes[0], quorum_queues)
    everyone = sorted(node.name for node in rabbit_cluster.nodes)
    for listed in rabbit_cluster.quorum_queues():
        assert sorted(listed["members"]) == everyone
    counts = rabbit_cluster.leader_counts()
    assert sum(counts.values()) == len(quorum_queues)
    victim = rabbit_cluster.busiest_node()
    assert counts[victim.name] == max(counts.values())
    survivor = next(node for node in rabbit_cluster.nodes if node is not victim)
    sent = {queue: [f"{queue}:{i}".encode() for i in range(100)] for queue in quorum_queues}
    for queue, bodies in sent.items():
        publish_confirmed(survivor, queue, bodies)

    rabbit_cluster.kill(victim)
    killed_at = time.monotonic()
    wait_for(lambda: victim.name not in rabbit_cluster.running_nodes(via=survivor), "the kill to be seen", 60)
    late = {queue: [f"{queue}:after-kill".encode()] for queue in quorum_queues}
    for queue, bodies in late.items():
        publish_once_a_leader_confirms(survivor, queue, bodies[0])  # a new leader where the old one died
    print(f"publishing confirmed again {time.monotonic() - killed_at:.1f} s after the SIGKILL")

    for queue in quorum_queues:
        assert drain(survivor, queue) == sent[queue] + late[queue]
    rejoined_s = rabbit_cluster.restart(victim)
    print(f"{victim.name} restarted and counted running again in {rejoined_s:.1f} s")
    for listed in rabbit_cluster.quorum_queues():
        assert sorted(listed["online"]) == everyone

    stopped = next(node for node in rabbit_cluster.nodes if node not in (victim, survivor))
    rabbit_cluster.stop(stopped)  # then another node leaves cleanly: two of three still make a quorum
    assert rabbit_cluster.running_nodes(via=survivor) == {victim.name, survivor.name}
    for queue in quorum_queues:
        publish_confirmed(victim, queue, [b"after-stop"])
        assert drain(survivor, queue) == [b"after-stop"]


def test_a_node_cut_off_from_the_others_stops_serving_and_loses_nothing_when_healed(
    rabbit_cluster: RabbitCluster, quorum_queues: list[str]
) -> None:
    cut, majority = rabbit_cluster.nodes[2], rabbit_cluster.nodes[0]
    declare_quorum(majority, quorum_queues[:1])
    queue = quorum_queues[0]
    with connect(cut) as client_of_cut:

        def dropped() -> bool:
            try:
                client_of_cut.process_data_events(time_limit=0)
            except pika.exceptions.AMQPError:
                return True
            return bool(client_of_cut.is_closed)

        rabbit_cluster.partition(cut)
        cut_at = time.monotonic()
        wait_for(lambda: not cut.serving(), f"{cut.name} to stop serving (pause_minority)", 60)
        paused_s = time.monotonic() - cut_at
        wait_for(dropped, f"{cut.name} to close its clients' connections", 30)
    rabbit_cluster.wait_running({majority.name, rabbit_cluster.nodes[1].name}, via=majority)
    print(f"the cut-off node stopped serving {paused_s:.1f} s after the cut (net_ticktime 10 s)")
    bodies = [f"during-partition:{i}".encode() for i in range(50)]
    publish_confirmed(majority, queue, bodies)

    rabbit_cluster.heal(cut)
    rejoined = rabbit_cluster.wait_rejoined(cut)
    print(f"{cut.name} served again and was counted running {rejoined.seconds:.1f} s after the heal{rejoined.note()}")
    assert drain(cut, queue) == bodies


def test_a_node_whose_boot_logs_the_global_hang_is_killed_and_started_again(rabbit_cluster: RabbitCluster) -> None:
    node = rabbit_cluster.nodes[1]
    rabbit_cluster.kill(node)
    rabbit_cluster.start_node(node)
    wait_for(lambda: rabbit_cluster.beam_pid(node) is not None, f"{node.name}'s VM", 30)
    stuck_vm = rabbit_cluster.beam_pid(node)  # booting: serving takes it seconds more
    with node.log.open("a") as log:  # what RabbitMQ 3.10.8 logs about 20 s into a boot stuck in global:sync()
        log.write(f"2026-01-01 00:00:00.000000+00:00 [info] <0.1.0> {GLOBAL_HANG}: global state on x seems broken\n")
    restarts_before = len(rabbit_cluster.hang_restarts)

    rejoined = rabbit_cluster.wait_rejoined(node)

    assert rejoined.restarts == 1
    assert rabbit_cluster.hang_restarts[restarts_before:] == [node.name]
    assert rabbit_cluster.beam_pid(node) not in (None, stuck_vm)  # a new VM serves
    assert rabbit_cluster.running_nodes() == {n.name for n in rabbit_cluster.nodes}
