"""A run feed on Redis: one pub/sub connection following many runs' channels (the run keys)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import redis.client


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
