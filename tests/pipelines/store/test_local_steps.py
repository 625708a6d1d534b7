"""Complete-and-claim and the lapse sweep, on every backend: the store claims what follows a step for the
worker that finished it, when it may, and hands back a local step whose worker stopped renewing it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import orjson

from pipelines.store import NewRun, RunStore
from pipelines.store.base import Advance, LocalOffer
from pipelines.wire.steps import Frame, Leaf

LEASE_MS = 60_000
#: A three-step chain a -> b -> c; b and c start where the step before them ends.
CHAIN = [("0.0", "a"), ("0.1", "b"), ("0.2", "c")]


def leaf(node: str, actor: str, index: int, **options: object) -> Leaf:
    return Leaf(node, actor, "default", (), {}, options, (Frame("c", "0", index, 3),))


def chain_run(**options: object) -> NewRun:
    leaves = [leaf(node, actor, i, **options) for i, (node, actor) in enumerate(CHAIN)]
    return NewRun(
        run_id=uuid.uuid4().hex,
        pipeline="chain",
        steps=CHAIN,
        starts={
            node: orjson.dumps([lf.to_json()]).decode() for node, lf in zip(["0.1", "0.2"], leaves[1:], strict=True)
        },
        entries={"0.1": ["0.1"], "0.2": ["0.2"]},
    )


def offer(*actors: str, lease_ms: int = LEASE_MS) -> LocalOffer:
    return LocalOffer(actors=" " + " ".join(actors) + " ", lease_ms=lease_ms)


def finish_first(
    store: RunStore, run: NewRun, local: LocalOffer | None, *, worker: str = "w1"
) -> Callable[[], Advance]:
    store.create_run(run)
    claim = store.claim_step(run.run_id, "0.0", attempt=1, lease_ms=LEASE_MS, worker=worker).attempt
    return lambda: store.complete_step(
        run.run_id, "0.0", [Frame("c", "0", 0, 3)], "1", claim=claim, local=local, worker=worker
    )


def step_of(store: RunStore, run_id: str, node: str) -> tuple[str, int, str | None]:
    status = store.get_run(run_id)
    assert status is not None
    step = next(s for s in status.steps if s.node == node)
    return step.state, step.attempts, step.worker


def test_completing_a_step_claims_the_one_step_that_follows_for_the_worker_that_offered_its_actor(
    store: RunStore,
) -> None:
    run = chain_run()

    advance = finish_first(store, run, offer("b", "c"))()

    assert (advance.kind, advance.node, advance.value_json, advance.claim) == ("local", "0.1", "1", 1)
    assert advance.leaves_json is not None
    assert [lf["actor"] for lf in orjson.loads(advance.leaves_json)] == ["b"]
    assert step_of(store, run.run_id, "0.1") == ("running", 1, "w1")
    copy = store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    assert copy.kind == "busy"  # a stray copy of it waits for the local claim's lease


def test_what_follows_is_published_when_its_actor_is_not_offered_has_an_eta_or_was_claimed_already(
    store: RunStore,
) -> None:
    others = finish_first(store, chain_run(), offer("c"))()
    delayed = finish_first(store, chain_run(eta=int(time.time() * 1000) + 60_000), offer("b"))()
    run = chain_run()
    complete = finish_first(store, run, offer("b"))
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    claimed = complete()
    plain = finish_first(store, chain_run(), None)()

    assert [a.kind for a in (others, delayed, claimed, plain)] == ["start"] * 4
    assert (others.claim, plain.claim) == (None, None)


def test_no_step_is_claimed_for_a_cancelled_run_or_one_past_its_deadline(store: RunStore) -> None:
    cancelled = chain_run()
    complete = finish_first(store, cancelled, offer("b"))
    store.cancel_run(cancelled.run_id)
    late = NewRun(**{**vars(chain_run()), "deadline_s": 0.001})
    store.create_run(late)
    claim = store.claim_step(late.run_id, "0.0", attempt=1, lease_ms=LEASE_MS).attempt
    time.sleep(0.01)  # past its deadline (a millisecond after its start)

    stopped = complete()
    overdue = store.complete_step(late.run_id, "0.0", [Frame("c", "0", 0, 3)], "1", claim=claim, local=offer("b"))

    assert (stopped.kind, overdue.kind) == ("stopped", "stopped")
    assert step_of(store, cancelled.run_id, "0.1")[0] != "running"
    assert step_of(store, late.run_id, "0.1")[0] != "running"


def test_a_local_step_whose_lease_lapsed_is_handed_back_and_one_still_held_is_not(store: RunStore) -> None:
    dead, held = chain_run(), chain_run()
    lapsing = finish_first(store, dead, offer("b", lease_ms=1))()
    kept = finish_first(store, held, offer("b"))()
    deadline = time.monotonic() + 10
    while True:
        checks = {check.run_id: check for check in store.sweep_lapsed(lease_ms=LEASE_MS, limit=100)}
        if dead.run_id in checks:
            break
        assert time.monotonic() < deadline, "the lapsed local step was never handed back"
        time.sleep(0.1)  # the index entry comes due a second after the lease (clocks differ)

    check = checks[dead.run_id]
    assert (lapsing.kind, kept.kind) == ("local", "local")
    assert check.kind == "redrive"
    assert [(group.node, group.steps) for group in check.groups] == [("0.1", ("0.1",))]
    assert held.run_id not in checks  # not due yet: its lease holds
    assert step_of(store, dead.run_id, "0.1")[0] == "retrying"
    again = store.claim_step(dead.run_id, "0.1", attempt=1, lease_ms=LEASE_MS)
    assert (again.kind, again.attempt) == ("run", 2)  # the copy published again claims it
    assert store.sweep_lapsed(lease_ms=LEASE_MS, limit=100) == []  # the index no longer holds it as due


def test_completing_a_local_step_ends_its_entry_in_the_index(store: RunStore) -> None:
    run = chain_run()
    advance = finish_first(store, run, offer("b", lease_ms=1))()
    assert advance.claim is not None
    store.complete_step(run.run_id, "0.1", [Frame("c", "0", 1, 3)], "2", claim=advance.claim, local_after="0.0")
    time.sleep(1.1)  # past when the entry would have come due

    assert store.sweep_lapsed(lease_ms=LEASE_MS, limit=100) == []
