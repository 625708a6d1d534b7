"""Settlements: acks below the oldest open delivery go as one ``multiple`` ack, rejections first and one
by one, and no ack ever covers a delivery still open."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipelines.broker.rabbitmq.settling import Settlements


class Channel:
    """Records the frames sent, in order, whether through the blocking channel or the one it wraps."""

    def __init__(self) -> None:
        self.frames: list[tuple[Any, ...]] = []
        self._impl = self

    def basic_ack(self, tag: int, multiple: bool = False) -> None:
        self.frames.append(("ack", tag, multiple))

    def basic_nack(self, tag: int, requeue: bool = True) -> None:
        self.frames.append(("nack", tag, requeue))


class Connection:
    """Holds the flush callback until the test runs it, as the consumer's I/O loop would later (it is
    its own wrapped connection and that connection's loop)."""

    is_open = True

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self._impl = self
        self.ioloop = self

    def add_callback_threadsafe(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def run(self) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback()


def settlements(delivered: range) -> tuple[Settlements, Connection, Channel]:
    connection, channel = Connection(), Channel()
    made = Settlements(connection=connection, channel=channel)
    for tag in delivered:
        made.delivered(tag, "q.a" if tag % 2 else "q.b")
    return made, connection, channel


def test_acks_of_every_delivery_up_to_the_oldest_open_one_go_as_one_multiple_ack() -> None:
    made, connection, channel = settlements(range(1, 6))
    for tag in (2, 1, 3):
        made.ack(tag)
    connection.run()

    assert channel.frames == [("ack", 3, True)]


def test_an_ack_above_an_open_delivery_goes_alone() -> None:
    made, connection, channel = settlements(range(1, 6))
    made.ack(2)
    made.ack(3)
    connection.run()
    made.ack(1)
    connection.run()

    assert channel.frames == [("ack", 2, False), ("ack", 3, False), ("ack", 1, False)]


def test_rejections_go_first_so_a_multiple_ack_never_covers_them() -> None:
    made, connection, channel = settlements(range(1, 7))
    made.ack(1)
    made.reject(2, requeue=True)
    made.ack(3)
    made.ack(4)
    made.reject(6, requeue=False)
    connection.run()

    assert channel.frames == [("nack", 2, True), ("nack", 6, False), ("ack", 4, True)]  # 5 is open


def test_once_nothing_is_open_every_ack_is_covered() -> None:
    made, connection, channel = settlements(range(1, 4))
    for tag in (3, 1, 2):
        made.ack(tag)
    connection.run()
    made.delivered(4, "q.b")
    made.ack(4)
    connection.run()

    assert channel.frames == [("ack", 3, True), ("ack", 4, False)]


def test_the_deliveries_held_unacknowledged_are_counted_per_queue_until_their_settlement_is_sent() -> None:
    made, connection, _ = settlements(range(1, 6))  # 1, 3, 5 from q.a; 2, 4 from q.b
    assert made.unacked() == {"q.a": 3, "q.b": 2}

    made.ack(1)
    made.reject(2, requeue=True)
    made.ack(4)
    assert made.unacked() == {"q.a": 3, "q.b": 2}  # queued, not sent yet
    connection.run()

    assert made.unacked() == {"q.a": 2}
