"""Following runs on Redis: one pub/sub connection for many runs' channels (the run keys), and the wait on
one run's channel that ``wait_run`` blocks in without polling."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import redis.client

from pipelines.store.base import RunStatus
from pipelines.store.waiting import wait_for_end


def wait_on_channel(
    pubsub: redis.client.PubSub,
    channel: str,
    *,
    ended: Callable[[], bool],
    read: Callable[[], RunStatus | None],
    timeout_s: float | None,
    on_change: Callable[[RunStatus], None] | None,
) -> None:
    """Block until the run published on ``channel`` has ended (or ``timeout_s`` passed), handing its
    snapshots to ``on_change`` (see :func:`~pipelines.store.waiting.wait_for_end`); closes ``pubsub``."""
    try:
        pubsub.subscribe(channel)  # before reading, so a change between the two is not missed
        wait_for_end(
            lambda timeout: pubsub.get_message(timeout=timeout),
            ended=ended,
            read=read,
            timeout_s=timeout_s,
            on_change=on_change,
        )
    finally:
        pubsub.close()


class RedisRunFeed:
    """:class:`~pipelines.store.roles.RunFeed` on the channels the store's scripts publish to."""

    def __init__(
        self,
        pubsub: redis.client.PubSub,
        channel_of: Callable[[str], str],
        answering: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._pubsub = pubsub
        self._channel_of = channel_of
        self._answering = answering
        self._runs: dict[bytes, str] = {}

    def follow(self, run_id: str) -> None:
        channel = self._channel_of(run_id)
        self._runs[channel.encode()] = run_id
        with self._answering():
            self._pubsub.subscribe(channel)

    def unfollow(self, run_id: str) -> None:
        channel = self._channel_of(run_id)
        self._runs.pop(channel.encode(), None)
        with self._answering():
            self._pubsub.unsubscribe(channel)  # type: ignore[no-untyped-call]

    def next_change(self, timeout_s: float) -> str | None:
        if not self._runs:  # redis-py returns at once when nothing is subscribed
            return None
        with self._answering():
            message: dict[str, Any] | None = self._pubsub.get_message(timeout=timeout_s)
        if message is None or message.get("type") != "message":
            return None
        return self._runs.get(message["channel"])

    def close(self) -> None:
        self._pubsub.close()
