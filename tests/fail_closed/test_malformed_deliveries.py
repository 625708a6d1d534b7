"""Whatever a producer publishes, the real consumer gives each delivery exactly one outcome.

A fixed corpus of the shapes that used to crash the consumer (or run a message without its guards) is
published among valid messages: each bad one is dead-lettered once as ``malformed message`` naming what
is wrong, every valid one runs once, and the consumer never restarts. Figures are printed (``-s``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from pipelines.app import App
from tests.support.fail_closed.fail_closed_support import (
    CORPUS,
    ConsumerRestarts,
    Ledger,
    RawPublisher,
    body,
    dead_letters_by_id,
    declare_sink,
)
from tests.support.fixtures import MakeApp, StartWorker

#: Longest the corpus may take to settle, in seconds (the old consumer needed minutes: FC_SETTLE_S=120).
SETTLE_S = float(os.environ.get("FC_SETTLE_S", "30"))
VALID = 40


@pytest.mark.timeout(SETTLE_S + 60)
def test_each_malformed_delivery_is_dead_lettered_once_and_valid_messages_around_it_run_once(
    make_app: MakeApp,
    start_worker: StartWorker,
    ledger: Callable[[App], Ledger],
    raw_publisher: RawPublisher,
    consumer_restarts: ConsumerRestarts,
) -> None:
    app = make_app()
    runs = declare_sink(app)
    seen = ledger(app)
    queue = app.broker.topology.actor_queues["sink"]
    bad = {f"bad{n}": name for n, name in enumerate(CORPUS)}
    valid = [f"ok{n}" for n in range(VALID)]
    # Interleaved, so each bad delivery shares the consumer's prefetch window with valid ones.
    per_bad = max(1, VALID // len(bad))
    pending_valid = iter(valid)
    for marker, name in bad.items():
        make_body, headers, _ = CORPUS[name]
        raw_publisher.publish(queue, make_body(marker), message_id=marker, headers=headers)
        for ok in [next(pending_valid, None) for _ in range(per_bad)]:
            if ok is not None:
                raw_publisher.publish(queue, body(ok), message_id=ok)
    for ok in pending_valid:
        raw_publisher.publish(queue, body(ok), message_id=ok)
    start_worker(app)

    def settled() -> bool:
        letters = dead_letters_by_id(app)
        return all(runs[m] for m in valid) and all(letters[m] for m in bad)

    seen.wait(settled, SETTLE_S)
    letters = dead_letters_by_id(app)
    all_letters = app.dead_letters.list(limit=10_000)
    lost = [m for m in valid if not runs[m]]
    duplicated = sum(runs[m] - 1 for m in valid if runs[m] > 1)
    bad_ran = [bad[m] for m in bad if runs[m]]
    stuck = [bad[m] for m in bad if not letters[m] and not runs[m]]
    print(
        f"\nfigures: malformed corpus, {len(bad)} bad among {VALID} valid: "
        f"runs of valid {sum(runs[m] for m in valid)}, "
        f"lost valid {len(lost)}, duplicated runs {duplicated}, valid dead-lettered "
        f"{sum(letters[m] for m in valid)}, bad that ran {len(bad_ran)} {bad_ran}, bad stuck {len(stuck)}, "
        f"dead letters {len(all_letters)} (bad: {sum(letters[m] for m in bad)}, "
        f"published twice or more: {sum(1 for m in bad if letters[m] > 1)}), consumer restarts "
        f"{consumer_restarts.restarts}"
    )
    assert consumer_restarts.restarts == 0, consumer_restarts.errors[:3]
    assert lost == []
    assert duplicated == 0
    assert bad_ran == []
    assert stuck == []
    assert all(letters[m] == 1 for m in bad)
    assert not any(letters[m] for m in valid)
    for letter in all_letters:
        name = bad[letter.id.split(".")[0]]
        assert letter.reason.reason == "malformed message", (name, letter.reason)
        assert CORPUS[name][2] in (letter.reason.error or ""), (name, letter.reason.error)
