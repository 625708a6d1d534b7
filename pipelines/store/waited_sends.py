"""Script calls sent with their ``WAIT`` for replicas (:mod:`pipelines.store.replica_wait`): in one
pipeline on one connection of a Redis, or on a Redis Cluster grouped by the primary of each call's slot,
each group with its own ``WAIT`` on a connection to that primary (``WAIT`` counts the replicas that
have the writes of the connection it is sent on, so it must follow them there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script

from pipelines.store.replica_wait import ReplicaWait

#: What a cluster node answers to a script sent to it directly that it did not run (the slot moved, the
#: node is failing over, no longer a primary, or gone): the call goes again through the cluster client,
#: which follows the cluster.
_SEND_AGAIN = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.ConnectionError,
    redis.TimeoutError,
)

Calls = Sequence[tuple[list[str], list[Any]]]


def send_waiting(wait: ReplicaWait, client: redis.Redis, script: Script, calls: Calls) -> list[Any]:
    """``script`` called with each of ``calls``, then ``WAIT``, in one pipeline on one of ``client``'s
    connections; the replies, each error reply in its place. Scripts Redis lost (it restarted) are loaded
    and the calls sent again: none of them ran."""
    for attempt in (1, 2):
        pipe: Any = client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command(*wait.command)
        sent: list[Any] = pipe.execute(raise_on_error=False)
        replies, acknowledged = sent[:-1], sent[-1]
        if attempt == 1 and any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
            client.script_load(script.script)
            continue
        writes = sum(not isinstance(reply, Exception) for reply in replies)
        if writes:
            wait.acknowledged(acknowledged, writes)
        return replies
    raise AssertionError("unreachable")


def send_waiting_per_primary(wait: ReplicaWait, cluster: RedisCluster, script: Script, calls: Calls) -> list[Any]:
    """:func:`send_waiting` for each primary's share of ``calls`` (by their first key's slot). A call the
    node did not take goes again through the cluster client, which follows the cluster: that one is not
    waited for, and is counted short."""
    groups: dict[str, tuple[ClusterNode, list[int]]] = {}
    for index, (keys, _) in enumerate(calls):
        node: ClusterNode = cast(Any, cluster).get_node_from_key(keys[0])
        groups.setdefault(node.name, (node, []))[1].append(index)
    replies: list[Any] = [None] * len(calls)
    for node, indexes in groups.values():
        try:
            node_replies = send_waiting(
                wait, cluster.get_redis_connection(node), script, [calls[index] for index in indexes]
            )
        except (redis.ConnectionError, redis.TimeoutError) as e:
            node_replies = [e] * len(indexes)
        for index, reply in zip(indexes, node_replies, strict=True):
            replies[index] = reply
            if isinstance(reply, _SEND_AGAIN):
                replies[index] = reply_or_error(partial(script, *calls[index], client=cluster))
                wait.unconfirmed(1)
    return replies


def reply_or_error(call: Callable[[], Any]) -> Any:
    """``call``'s reply, or its Redis error in its place."""
    try:
        return call()
    except redis.exceptions.RedisError as e:
        return e
