"""The dead-letter administration every broker implements (``DeadLetterAdmin``), run on each of them.

A new broker joins by being one more broker kind (``tests/support/backends.py``): these tests say what
``pipelines.dead_letters.queues`` relies on.
"""

from __future__ import annotations

from dataclasses import dataclass

import dramatiq
import pytest

from pipelines.app import App
from pipelines.dead_letters.reasons import DeadLetterAdmin, DeadLetterReason, RawDeadLetter
from pipelines.wire import naming
from pipelines.wire.codec import encode_message
from tests.support.backends import on_each_broker
from tests.support.fixtures import MakeApp

pytestmark = on_each_broker


@dataclass
class DeadLetters:
    """A broker's dead-letter administration, and the queues of one actor to try it on."""

    admin: DeadLetterAdmin
    app: App
    home: str
    """The actor queue whose dead letters these are."""
    dead: str
    """Its dead-letter queue."""

    def put(self, n: int, why: str = "retries exhausted") -> tuple[str, bytes, DeadLetterReason]:
        """Dead-letter the n-th message for the actor; returns its id, body and reason."""
        message = self.app.broker.get_actor("charge").message(n)
        body = encode_message(message)
        reason = DeadLetterReason(reason=why, error_type="ValueError", error=f"order {n}", actor="charge", at="now")
        self.admin.dead_letter(body, message_id=message.message_id, reason=reason, queue=self.home)
        return message.message_id, body, reason

    def body_of(self, message_id: str) -> bytes:
        return next(
            letter.body for letter in self.admin.peek_dead_letters(self.dead, 100) if letter.message_id == message_id
        )

    def ids(self, limit: int = 100) -> list[str]:
        return [letter.message_id for letter in self.admin.peek_dead_letters(self.dead, limit)]


@pytest.fixture
def letters(make_app: MakeApp) -> DeadLetters:
    app = make_app()
    dramatiq.actor(actor_name="charge", broker=app.broker)(lambda n: None)
    admin: DeadLetterAdmin = app.broker  # checked by mypy: both brokers implement the protocol
    home = app.broker.topology.actor_queues["charge"]
    return DeadLetters(admin, app, home, naming.dead_letter_queue(home))


def test_a_dead_letter_keeps_its_body_id_and_reason_and_peeking_leaves_it_in_place(letters: DeadLetters) -> None:
    message_id, body, reason = letters.put(1)

    for _ in range(2):
        [letter] = letters.admin.peek_dead_letters(letters.dead, 10)

        assert (letter.queue, letter.message_id, letter.body) == (letters.dead, message_id, body)
        assert DeadLetterReason.from_headers(letter.headers) == reason


def test_peeking_gives_at_most_the_limit_oldest_first(letters: DeadLetters) -> None:
    put = [letters.put(n)[0] for n in range(3)]

    assert letters.ids(limit=2) == put[:2]
    assert letters.ids() == put


def test_a_letter_leaves_its_queue_only_when_removing_it_succeeds(letters: DeadLetters) -> None:
    first, _, _ = letters.put(1)
    second, body, _ = letters.put(2)
    handed: list[tuple[str, bytes]] = []

    def fail_to_replay(letter: RawDeadLetter) -> bool:
        if letter.message_id == second:
            raise RuntimeError("the replay could not be published")
        return False

    with pytest.raises(RuntimeError):
        letters.admin.remove_dead_letters(letters.dead, fail_to_replay)
    assert letters.ids() == [first, second]

    def replay_second(letter: RawDeadLetter) -> bool:
        handed.append((letter.message_id, letter.body))
        return letter.message_id == second

    letters.admin.remove_dead_letters(letters.dead, replay_second)
    assert handed == [(first, letters.body_of(first)), (second, body)]
    assert letters.ids() == [first]


def test_an_error_while_removing_keeps_the_letters_not_handled_yet_and_removes_those_before(
    letters: DeadLetters,
) -> None:
    put = [letters.put(n)[0] for n in range(4)]

    def remove_until_the_third(letter: RawDeadLetter) -> bool:
        if letter.message_id == put[2]:
            raise RuntimeError("the broker went away")
        return True

    with pytest.raises(RuntimeError):
        letters.admin.remove_dead_letters(letters.dead, remove_until_the_third)
    assert letters.ids() == put[2:]


def test_removing_nothing_leaves_every_letter_in_its_order(letters: DeadLetters) -> None:
    put = [letters.put(n)[0] for n in range(3)]

    letters.admin.remove_dead_letters(letters.dead, lambda letter: False)

    assert letters.ids() == put


def test_purging_deletes_every_letter_and_says_how_many(letters: DeadLetters) -> None:
    for n in range(3):
        letters.put(n)

    assert letters.admin.purge_dead_letters(letters.dead) == 3
    assert letters.ids() == []
    assert letters.admin.purge_dead_letters(letters.dead) == 0


@pytest.mark.parametrize("queue", ["declared", "unknown"])
def test_a_queue_without_letters_reads_as_empty(letters: DeadLetters, queue: str) -> None:
    dead = letters.dead if queue == "declared" else f"{letters.app.settings.namespace}.nothing.here.dead"

    assert letters.admin.peek_dead_letters(dead, 10) == []
    letters.admin.remove_dead_letters(dead, lambda letter: pytest.fail("a queue without letters handed one"))
    assert letters.admin.purge_dead_letters(dead) == 0


def test_letters_of_one_actor_stay_out_of_another_actors_queue(letters: DeadLetters) -> None:
    dramatiq.actor(actor_name="refund", broker=letters.app.broker)(lambda n: None)
    other = naming.dead_letter_queue(letters.app.broker.topology.actor_queues["refund"])
    letters.put(1)

    assert letters.admin.peek_dead_letters(other, 10) == []
    assert letters.admin.purge_dead_letters(other) == 0
    assert len(letters.ids()) == 1
