"""Actor profiles: what each declares, how messages are routed and settled, and the clear refusals."""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import pytest
from periodiq import cron

from pipelines import options as opt
from pipelines.broker import ExchangeBroker
from pipelines.errors import DefinitionError, InvalidActorOption, TopologyMismatch
from pipelines.profiles.kinds import partition_for
from tests.support.backends import only_on
from tests.support.broker_witness import ready
from tests.support.fixtures import MakeApp, Observe, StartWorker

memory_only = only_on("memory")
rabbitmq_only = only_on("rabbitmq")


@memory_only
@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"profile": "speedy"}, r"profile='speedy' is not one of fire_and_forget, guaranteed, ordered"),
        ({"profile": "guaranteed"}, r"profile='guaranteed' but has no idempotency_key"),
        ({"partitions": 4}, r"partitions only apply to profile='ordered', and this actor is 'guaranteed'"),
        ({"profile": "ordered"}, r"ordering_key=None names none of its parameters \(user_id, seq\)"),
        ({"profile": "ordered", "ordering_key": "user"}, r"ordering_key='user' names none of its parameters"),
        ({"profile": "ordered", "ordering_key": "user_id", "partitions": 0}, r"partitions=0 must be a whole number"),
        ({"profile": "ordered", "ordering_key": "user_id", "subscribe": ["user.*"]}, r"cannot subscribe to events"),
        ({"profile": "scheduled"}, r"has no schedule: add periodic=cron"),
        ({"periodic": cron("* * * * *"), "missed": "sometimes"}, r"missed='sometimes' must be one of skip, catch_up"),
        ({"profile": "long_running", "lease_s": 0}, r"lease_s=0 must be a number of seconds >= 1"),
        ({"profile": "long_running", "on_lost": "ignore"}, r"on_lost='ignore' must be one of retry, fail"),
    ],
)
def test_invalid_profile_options_are_refused_at_declaration_naming_the_fix(
    make_app: MakeApp, options: dict[str, Any], complaint: str
) -> None:
    app = make_app()

    def timeline(user_id: str, seq: int) -> None: ...

    with pytest.raises(InvalidActorOption, match=complaint):
        dramatiq.actor(broker=app.broker, actor_name="timeline", **options)(timeline)
    assert "timeline" not in app.broker.actors


@memory_only
def test_each_profile_fills_in_its_defaults(make_app: MakeApp) -> None:
    app = make_app(profiles={"ordered_partitions": 4, "fire_and_forget_max_retries": 2})

    def noop(user_id: str = "") -> None: ...

    plain = dramatiq.actor(broker=app.broker, actor_name="plain")(noop)
    quick = dramatiq.actor(broker=app.broker, actor_name="quick", profile="fire_and_forget")(noop)
    ordered = dramatiq.actor(broker=app.broker, actor_name="ordered", profile="ordered", ordering_key="user_id")(noop)
    nightly = dramatiq.actor(broker=app.broker, actor_name="nightly", periodic=cron("0 2 * * *"))(noop)
    export = dramatiq.actor(broker=app.broker, actor_name="export", profile="long_running")(noop)

    assert plain.options[opt.PROFILE] == "guaranteed"
    assert (quick.options[opt.PROFILE], quick.options[opt.MAX_RETRIES]) == ("fire_and_forget", 2)
    assert (ordered.options[opt.PARTITIONS], ordered.options[opt.MAX_BACKOFF]) == (4, 30_000)
    assert (nightly.options[opt.PROFILE], nightly.options[opt.MISSED]) == ("scheduled", "skip")
    assert (export.options[opt.LEASE], export.options[opt.ON_LOST], export.queue_name) == (
        60.0,
        "retry",
        "long_running",
    )


@memory_only
def test_the_topology_declares_what_each_profile_needs(make_app: MakeApp) -> None:
    app = make_app(profiles={"ordered_partitions": 3})
    ns = app.settings.namespace

    def noop(user_id: str = "") -> None: ...

    dramatiq.actor(broker=app.broker, actor_name="quick", profile="fire_and_forget")(noop)
    dramatiq.actor(broker=app.broker, actor_name="feed", profile="ordered", ordering_key="user_id")(noop)
    topology = app.broker.topology
    queues = {q.name: q for q in topology.queues}
    bindings = {(b.queue, b.routing_key) for b in topology.bindings if b.exchange == f"{ns}.work"}

    assert queues[f"{ns}.default.quick"].arguments["x-queue-type"] == "classic"
    partitions = [f"{ns}.default.feed.p{p}" for p in range(3)]
    assert topology.consume_queues["feed"] == tuple(partitions)
    for p, name in enumerate(partitions):
        assert queues[name].arguments["x-single-active-consumer"] is True
        assert queues[name].arguments["x-queue-type"] == "quorum"
        assert queues[name].arguments["x-dead-letter-routing-key"] == f"{ns}.default.feed"
        assert (name, f"feed.~{p}") in bindings
    assert f"{ns}.default.feed" not in queues  # only the partitions, and the shared dead-letter queue
    assert f"{ns}.default.feed.dead" in queues


def test_partitions_are_a_stable_hash_of_the_key() -> None:
    assert [partition_for(f"user-{n}", 8) for n in range(6)] == [partition_for(f"user-{n}", 8) for n in range(6)]
    assert partition_for("user-1", 8) == 4  # crc32, the same in every process and Python version
    assert len({partition_for(f"user-{n}", 8) for n in range(200)}) == 8


@rabbitmq_only
def test_a_message_to_an_ordered_actor_is_routed_to_its_keys_partition_and_fan_outs_split_it_off(
    make_app: MakeApp,
) -> None:
    app = make_app()
    feed = dramatiq.actor(broker=app.broker, actor_name="feed", profile="ordered", ordering_key="user_id")(
        lambda user_id, event: None
    )
    audit = dramatiq.actor(broker=app.broker, actor_name="audit")(lambda user_id, event: None)
    topology = app.broker.topology
    partitions = topology.consume_queues["feed"]
    key_partition = partitions[partition_for("user-1", len(partitions))]

    sent = app.broker.enqueue(feed.message("user-1", "joined"))
    shared: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="",
        actor_name="",
        args=("joined",),
        kwargs={},
        options={opt.BRANCHES: {name: {"args": ["user-1"]} for name in ("feed", "audit")}},
    )
    published = app.broker.enqueue_many([shared])

    assert sent.options[opt.PARTITION] == partition_for("user-1", 8)
    assert sorted(m.actor_name for m in published) == ["", "feed"]
    direct = next(m for m in published if m.actor_name == "feed")
    assert (direct.args, direct.options[opt.PARTITION]) == (("user-1", "joined"), partition_for("user-1", 8))
    assert next(m for m in published if not m.actor_name).options[opt.BRANCHES].keys() == {"audit"}
    # Where RabbitMQ put them: both in the key's partition, the fan-out's copy for audit in audit's queue.
    held = ready(app.settings.broker.url, [*partitions, topology.actor_queues[audit.actor_name]])
    assert held == {**dict.fromkeys(partitions, 0), key_partition: 2, topology.actor_queues["audit"]: 1}
    with pytest.raises(DefinitionError, match=r"Actor 'feed' cannot take these arguments: missing .* 'user_id'"):
        app.broker.enqueue(feed.message_with_options(kwargs={"event": "joined"}))


def test_a_fire_and_forget_message_is_dropped_after_its_retries_not_dead_lettered(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app(profiles={"fire_and_forget_max_retries": 2}, retries={"min_backoff_s": 0.01, "max_backoff_s": 0.05})
    observer = observe(app)
    attempts: list[str] = []

    @dramatiq.actor(broker=app.broker, profile="fire_and_forget")
    def welcome_email(user: str) -> None:
        attempts.append(user)
        raise ConnectionError("mail server down")

    start_worker(app)
    welcome_email.send("ada")
    observer.wait_handled("welcome_email", 3)
    observer.wait_dead_lettered("welcome_email", 1)  # the worker's rejection, settled as a drop

    assert attempts == ["ada"] * 3
    assert app.dead_letters.list() == []


@rabbitmq_only
def test_an_ordered_actor_keeps_each_keys_order_through_retries_in_place_and_a_dead_letter(
    make_app: MakeApp, start_worker: StartWorker, observe: Observe
) -> None:
    app = make_app(profiles={"ordered_partitions": 4}, retries={"min_backoff_s": 0.01, "max_backoff_s": 0.05})
    observer = observe(app)
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()
    flaky_failures = {"u0": 2}

    @dramatiq.actor(broker=app.broker, profile="ordered", ordering_key="user", max_retries=3)
    def timeline(user: str, seq: int) -> None:
        if user == "u0" and seq == 3 and flaky_failures["u0"]:
            flaky_failures["u0"] -= 1
            raise ConnectionError("feed store busy")
        if user == "u1" and seq == 5:
            raise ValueError("corrupt event")
        with lock:
            seen.setdefault(user, []).append(seq)

    users, events = 12, 20
    app.broker.enqueue_many([timeline.message(f"u{u}", seq) for seq in range(events) for u in range(users)])
    start_worker(app, threads=8)
    # Every event handled once, plus 2 retries of u0's 3rd and 3 of u1's 5th (then its dead letter).
    observer.wait_handled("timeline", users * events + 2 + 3, timeout_s=60)
    observer.wait_dead_lettered("timeline", 1)

    assert seen["u0"] == list(range(events))
    assert seen["u1"] == [seq for seq in range(events) if seq != 5]
    assert all(seen[f"u{u}"] == list(range(events)) for u in range(2, users))
    [letter] = app.dead_letters.list()
    assert letter.message is not None
    assert (letter.reason.reason, letter.message.args) == ("retries exhausted", ("u1", 5))


@rabbitmq_only
def test_changing_an_existing_actors_profile_is_refused_with_what_to_do(make_app: MakeApp) -> None:
    before = make_app()
    assert isinstance(before.broker, ExchangeBroker)
    dramatiq.actor(broker=before.broker, actor_name="digest")(lambda: None)
    before.broker.ensure_topology()
    after = make_app(namespace=before.settings.namespace)
    digest = dramatiq.actor(broker=after.broker, actor_name="digest", profile="fire_and_forget")(lambda: None)

    with pytest.raises(TopologyMismatch, match=r"queue '[^']*\.default\.digest'.*delete the old queue"):
        digest.send()
