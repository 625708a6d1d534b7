"""Workers SIGKILLed and connections cut mid-run: nothing lost, no effect applied twice.

Figures (messages, faults, lost, re-executions) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import random
import subprocess
from typing import Any

import dramatiq
import pytest

from pipelines import chain, chord, for_each, step
from tests.support.faults.fault_scenario import Fault
from tests.support.housekeeping import rabbitmqctl

DELIVERY_LIMIT = 2  # as the fault fixture configures

ITEMS = 2000
CHAINS = 500
KILLS = 5


def publish_with_duplicates(fault: Fault, messages: list[dramatiq.Message[Any]], share: float) -> int:
    """Publish ``messages`` in batches, a ``share`` of them twice (a publisher retry after a lost confirm)."""
    rng = random.Random(7)
    twice = [m for m in messages if rng.random() < share]
    batch = messages + twice
    rng.shuffle(batch)
    for start in range(0, len(batch), 500):
        fault.app.broker.enqueue_many(batch[start : start + 500])
    return len(twice)


def settled_runs(fault: Fault, run_ids: list[str]) -> int:
    return sum(1 for run_id in run_ids if (status := fault.app.store.get_run(run_id)) and status.is_final)


def test_kills_lose_nothing_and_apply_each_effect_once(fault: Fault) -> None:
    work, chain_step = fault.actors["work"], fault.actors["chain_step"]
    duplicates = publish_with_duplicates(fault, [work.message(f"i{n}") for n in range(ITEMS)], share=0.1)
    runs = [fault.app.start(chain(*[step(chain_step, f"c{n}")] * 3), args=(0,)) for n in range(CHAINS)]
    fault.workers.start()

    for kill in range(1, KILLS + 1):
        # Kill whenever another slice of the work has been done, so every kill lands mid-run.
        share = kill * ITEMS // (KILLS + 2)
        fault.wait_count(lambda: len(fault.ledger.count("work", "effects")), share, "progress")
        fault.workers.kill()
        fault.workers.start()
    fault.wait_until(lambda: len(fault.ledger.count("work", "effects")) == ITEMS, "every item applied")
    fault.wait_until(lambda: settled_runs(fault, [r.id for r in runs]) == CHAINS, "every chain settled")

    effects = fault.ledger.count("work", "effects")
    executions = fault.ledger.count("work", "executions")
    chain_effects = fault.ledger.count("chain", "effects")
    statuses = [run.status() for run in runs]
    dead = fault.app.dead_letters.list(limit=10_000)
    lost_items = [f"i{n}" for n in range(ITEMS) if f"i{n}" not in effects]
    re_executed = sum(count - 1 for count in executions.values())
    print(
        f"\nkills: {fault.workers.kills}; messages: {ITEMS} items (+{duplicates} duplicate publishes), "
        f"{CHAINS} chains x 3 steps; lost items: {len(lost_items)}; failed chains: "
        f"{sum(s.state != 'succeeded' for s in statuses)}; dead letters: {len(dead)}; "
        f"item bodies re-executed: {re_executed} (killed mid-run, or between effect and completion record)"
    )

    assert fault.workers.kills == KILLS
    assert lost_items == []
    assert all(status.state == "succeeded" and status.result == 3 for status in statuses)
    assert len(chain_effects) == 3 * CHAINS
    assert dead == []
    # Duplicate publishes are skipped by their idempotency key: only deliveries interrupted by a kill
    # (at most threads + prefetch per kill) may run their body again.
    assert re_executed <= KILLS * (8 + 16)


def test_connections_cut_from_the_broker_lose_nothing(fault: Fault) -> None:
    work = fault.actors["work"]
    items = 1000
    publish_with_duplicates(fault, [work.message(f"cut{n}") for n in range(items)], share=0.0)
    fault.workers.start()

    cuts = 3
    for cut in range(1, cuts + 1):
        share = cut * items // (cuts + 2)
        fault.wait_count(lambda: len(fault.ledger.count("work", "effects")), share, "progress")
        subprocess.run([*rabbitmqctl(), "-q", "close_all_connections", "fault test"], check=True, capture_output=True)
    fault.wait_until(lambda: len(fault.ledger.count("work", "effects")) == items, "every item applied")
    # The producer's own connection was cut too: it publishes again on a fresh one.
    after = [f"late{n}" for n in range(10)]
    fault.app.broker.enqueue_many([work.message(item) for item in after])
    fault.wait_until(lambda: all(item in fault.ledger.count("work", "effects") for item in after), "late items")

    print(f"\nconnection cuts: {cuts}; messages: {items} + 10 published after the cuts; lost: 0")
    assert fault.app.dead_letters.list() == []


def test_chords_with_duplicated_members_and_a_kill_fire_each_callback_once_after_all_members(
    fault: Fault, monkeypatch: pytest.MonkeyPatch
) -> None:
    member, gather = fault.actors["member"], fault.actors["gather"]
    chords, width = 200, 20
    original = fault.app.broker.enqueue_many
    rng = random.Random(11)
    duplicated = 0

    def twice_sometimes(messages: list[dramatiq.Message[Any]], **kwargs: Any) -> Any:
        nonlocal duplicated
        extra = [m for m in messages if m.actor_name == "member" and rng.random() < 0.1]
        duplicated += len(extra)
        return original([*messages, *extra], **kwargs)

    monkeypatch.setattr(fault.app.broker, "enqueue_many", twice_sometimes)
    runs = [fault.app.start(chord(for_each(member, range(width)), then=step(gather, f"ch{n}"))) for n in range(chords)]
    fault.workers.start()
    fault.wait_until(lambda: len(fault.ledger.count("gather", "effects")) >= chords // 3, "some callbacks")
    fault.workers.kill()
    fault.workers.start()
    fault.wait_until(lambda: settled_runs(fault, [r.id for r in runs]) == chords, "every chord settled")

    values = fault.ledger.values("gather")
    executions = fault.ledger.count("gather", "executions")
    print(
        f"\nchords: {chords} x {width} members; duplicate member publishes: {duplicated}; kills: 1; "
        f"callbacks: {len(values)}; callback bodies run twice: {sum(c > 1 for c in executions.values())}"
    )
    expected = ",".join(str(i) for i in range(width))
    assert duplicated > 0
    assert all(run.status().state == "succeeded" for run in runs)
    assert values == {f"ch{n}": expected for n in range(chords)}
    assert sum(c > 1 for c in executions.values()) <= 8 + 16


def test_a_message_that_kills_its_worker_is_dead_lettered_by_the_delivery_limit(fault: Fault) -> None:
    fault.actors["poison"].send()
    crashes = 0
    while not fault.app.dead_letters.list("poison"):
        fault.workers.start(threads=1)
        fault.wait_until(lambda: fault.workers.died() or bool(fault.app.dead_letters.list("poison")), "a crash")
        crashes += fault.workers.died()
        fault.workers.stop()
        assert crashes <= DELIVERY_LIMIT + 2, fault.log.read_text(errors="replace")[-3000:]

    [letter] = fault.app.dead_letters.list("poison")
    print(f"\npoison message: worker crashed {crashes} times, then dead-lettered ({letter.reason.reason})")
    assert letter.reason.reason == "delivery limit"
    # Quorum queues count every return to the queue (a crash, or a worker stopped while holding it):
    # at most DELIVERY_LIMIT + 1 deliveries in all, so at most that many crashes.
    assert 1 <= crashes <= DELIVERY_LIMIT + 1, fault.log.read_text(errors="replace")[-3000:]
