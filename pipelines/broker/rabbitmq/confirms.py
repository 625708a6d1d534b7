"""Publishing with batched publisher confirms on one pika connection.

pika's ``BlockingChannel`` waits for a confirm after every publish (one round trip per message). Here
a whole batch is written first and the confirms are awaited once, which is what RabbitMQ's
documentation recommends; ``mandatory`` returns tell us which messages no queue took.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.utils.connection_workflow import AMQPConnectorException

from pipelines.broker.rabbitmq.connecting import open_connection
from pipelines.errors import PublishError

#: Longest wait for RabbitMQ to confirm a batch before the connection is treated as broken.
CONFIRM_TIMEOUT_S = 30.0

#: pika errors that mean "this connection or channel is gone; open another and try again".
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    pika.exceptions.AMQPConnectionError,
    AMQPConnectorException,  # a server that takes the TCP connection but never answers the handshake
    pika.exceptions.AMQPChannelError,
    ConnectionError,
    OSError,
)

#: What RabbitMQ answers to a wrong user, password or virtual host: trying again will not help.
REFUSED_LOGIN: tuple[type[Exception], ...] = (
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
    pika.exceptions.AuthenticationError,
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One AMQP publish."""

    exchange: str
    routing_key: str
    body: bytes
    message_id: str
    headers: dict[str, Any] | None = None
    priority: int | None = None
    persistent: bool = True
    """Written to disk by RabbitMQ (delivery mode 2)."""
    confirm: bool = True
    """Wait for RabbitMQ's confirm (a batch of only unconfirmed messages does not wait at all)."""


class ConfirmTimeout(TimeoutError):
    """RabbitMQ did not confirm in time (a node cut off from its cluster, or a queue without a leader):
    the batch is treated as interrupted, its unconfirmed messages sent again on another connection."""


def _nothing() -> None:
    """A callback that only wakes the connection's event loop."""


class Refused(PublishError):
    """RabbitMQ nacked these publishes (a full queue with ``reject-publish``, or an internal error)."""

    def __init__(self, items: list[Outgoing], returned: list[Outgoing] | None = None) -> None:
        super().__init__(f"RabbitMQ refused (nacked) message(s) {', '.join(i.message_id for i in items[:5])}.")
        self.items = items
        self.returned = returned or []
        """Messages of the same batch that RabbitMQ returned as unroutable (they were not nacked)."""


class BatchInterrupted(Exception):
    """The connection broke during a batch; ``confirmed`` holds the indexes RabbitMQ had confirmed."""

    def __init__(self, confirmed: set[int], cause: BaseException) -> None:
        super().__init__(str(cause))
        self.confirmed = confirmed
        self.cause = cause


class ConfirmPublisher:
    """A connection with one confirm-mode channel for publishing and one plain channel for declaring."""

    def __init__(self, parameters: Any, *, confirm: bool) -> None:
        self.connection = open_connection(parameters)
        self._confirm = confirm
        self._channel = self.connection.channel()
        # pika's blocking channel only confirms one publish at a time; its wrapped channel lets us
        # write a batch and collect the acks as they come.
        self._impl = self._channel._impl
        self._next_tag = 1
        self._lowest_open = 1
        self._settled_above: set[int] = set()
        self._nacked: set[int] = set()
        self._returned: set[str] = set()
        self._declare_channel: Any = None
        if confirm:
            selected: list[object] = []

            def on_selected(frame: object) -> None:
                selected.append(frame)
                self._wake()

            self._impl.confirm_delivery(ack_nack_callback=self._on_confirm, callback=on_selected)
            deadline = time.monotonic() + CONFIRM_TIMEOUT_S
            while not selected:
                if time.monotonic() > deadline:  # a server that took the connection but never answers
                    self.close()
                    raise ConfirmTimeout(f"RabbitMQ did not turn on publisher confirms in {CONFIRM_TIMEOUT_S} s")
                self.connection.process_data_events(time_limit=1)
            self._impl.add_on_return_callback(self._on_return)

    def _wake(self) -> None:
        # process_data_events returns early only for events of its own; queueing a no-op callback is
        # the public way to end the wait as soon as the confirm we wait for has arrived.
        self.connection.add_callback_threadsafe(_nothing)

    @property
    def declare_channel(self) -> Any:
        """A channel for declarations and passive checks (a 404 closes it, not the publishing channel)."""
        if self._declare_channel is None or not self._declare_channel.is_open:
            self._declare_channel = self.connection.channel()
        return self._declare_channel

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag = method.delivery_tag
        tags = range(self._lowest_open, tag + 1) if method.multiple else (tag,)
        if isinstance(method, pika.spec.Basic.Nack):
            self._nacked.update(tags)
        if method.multiple:
            self._lowest_open = max(self._lowest_open, tag + 1)
        else:
            self._settled_above.add(tag)
        while self._lowest_open in self._settled_above:
            self._settled_above.discard(self._lowest_open)
            self._lowest_open += 1

    def _on_return(self, _channel: Any, _method: Any, properties: Any, _body: bytes) -> None:
        self._returned.add(properties.message_id)

    def _is_settled(self, tag: int) -> bool:
        return tag < self._lowest_open or tag in self._settled_above

    def publish(self, batch: Sequence[Outgoing]) -> list[str]:
        """Publish ``batch`` and wait for every confirm.

        Returns:
            The message ids RabbitMQ returned as unroutable.

        Raises:
            BatchInterrupted: The connection or channel broke, or RabbitMQ did not confirm within
                ``CONFIRM_TIMEOUT_S``; some messages may be confirmed.
            Refused: RabbitMQ nacked a message.
        """
        first = self._next_tag
        try:
            for item in batch:
                properties = pika.BasicProperties(
                    delivery_mode=2 if item.persistent else 1,
                    message_id=item.message_id,
                    content_type="application/json",
                    headers=item.headers,
                    priority=item.priority,
                )
                self._impl.basic_publish(item.exchange, item.routing_key, item.body, properties, mandatory=True)
                self._next_tag += 1
            if not self._confirm or not any(item.confirm for item in batch):
                self.connection.process_data_events(time_limit=0)
                return []
            last = self._next_tag - 1
            self._await_confirms(last, len(batch))
        except CONNECTION_ERRORS as e:
            confirmed = {i for i in range(len(batch)) if self._confirm and self._is_settled(first + i)}
            raise BatchInterrupted(confirmed, e) from None
        nacked = [batch[tag - first] for tag in range(first, last + 1) if tag in self._nacked]
        # Earlier unconfirmed (fire-and-forget) publishes are settled too by now: forget their outcomes.
        self._nacked = {tag for tag in self._nacked if tag > last}
        ids = {item.message_id for item in batch}
        returned = [i for i in self._returned if i in ids]
        self._returned.clear()
        if nacked:
            raise Refused(nacked, [item for item in batch if item.message_id in returned])
        return returned

    def _await_confirms(self, last: int, count: int) -> None:
        """Turn the connection's I/O loop until RabbitMQ has settled every tag up to ``last``.

        This is how pika's own blocking calls wait (its channel's ``_flush_output``): the loop stops as
        soon as the condition holds, with no wake-up callback and no timer per turn; one timer makes it
        turn at the deadline if RabbitMQ sends nothing.

        Raises:
            ConfirmTimeout: Not settled within ``CONFIRM_TIMEOUT_S``.
            pika.exceptions.AMQPError: The channel or the connection closed meanwhile.
        """
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        timer = self.connection.call_later(CONFIRM_TIMEOUT_S, _nothing)
        try:
            self._channel._flush_output(lambda: self._is_settled(last) or time.monotonic() > deadline)
        finally:
            if self.connection.is_open:
                self.connection.remove_timeout(timer)
        if self._is_settled(last):
            return
        if self._channel.is_closed:
            raise pika.exceptions.ChannelWrongStateError("the publishing channel closed before RabbitMQ confirmed")
        raise ConfirmTimeout(f"RabbitMQ did not confirm {count} message(s) in {CONFIRM_TIMEOUT_S} s")

    def close(self) -> None:
        try:
            if self.connection.is_open:
                self.connection.close()
        except CONNECTION_ERRORS:
            pass
