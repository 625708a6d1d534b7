"""The five actor profiles: one actor option that picks queues, retries and guarantees together.

=================  ====================================  ===========================================
profile            what is declared in RabbitMQ          how its messages are handled
=================  ====================================  ===========================================
fire_and_forget    a classic queue; messages transient   published without waiting for a confirm;
                                                         a few retries, then dropped and counted
guaranteed         a quorum queue (``[broker]``), with   confirmed publishes; idempotency key
(the default)      delivery limit and dead-letter queue  required; retries with backoff, then a
                                                         dead letter with the reason
ordered            N partition queues (quorum, single    one message per key at a time, in publish
                   active consumer), routed by the key   order; a failure retries in place, blocking
                                                         only its partition, then is dead-lettered
scheduled          as guaranteed                         periodiq cron ticks claimed once per tick
                                                         in the run store; missed ticks skipped or
                                                         caught up once
long_running       as guaranteed, on its own Dramatiq    acknowledged on start, owned through a
                   queue                                 lease renewed by heartbeat; progress and
                                                         cooperative cancellation; a job whose
                                                         worker died is retried or failed
=================  ====================================  ===========================================

An actor without ``profile`` is ``guaranteed`` (``scheduled`` when it has a ``periodic`` schedule),
except that only an explicit ``profile="guaranteed"`` insists on an idempotency key: plain Dramatiq
actors keep working unchanged, and pipeline steps are keyed by their run and step anyway.
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable
from typing import Any, Final, Literal, get_args

import dramatiq

from pipelines import options as opt
from pipelines.config.sections import ProfilesConfig
from pipelines.errors import DefinitionError, InvalidActorOption

Profile = Literal["fire_and_forget", "guaranteed", "ordered", "scheduled", "long_running"]
PROFILES: Final[tuple[str, ...]] = get_args(Profile)
DEFAULT_PROFILE: Final = "guaranteed"
MissedPolicy = Literal["skip", "catch_up"]
LostPolicy = Literal["retry", "fail"]

#: Options that belong to one profile only.
_OWN_OPTIONS: Final[dict[str, tuple[str, ...]]] = {
    "ordered": (opt.PARTITIONS, opt.ORDERING_KEY),
    "scheduled": (opt.MISSED,),
    "long_running": (opt.LEASE, opt.ON_LOST),
}

#: One line per profile, for ``pipelines topology``.
SUMMARIES: Final[dict[str, str]] = {
    "fire_and_forget": "classic queue, transient, unconfirmed; dropped (counted) after its retries",
    "guaranteed": "durable queue, confirmed; retries with backoff, then dead-lettered",
    "ordered": "partitioned by key, single active consumer per partition; retries in place",
    "scheduled": "cron {periodic}, each tick claimed once in the run store; missed ticks: {missed}",
    "long_running": "acknowledged on start, lease {lease:g} s renewed by heartbeat; lost jobs: {on_lost}",
}


def profile_of(actor: dramatiq.Actor[Any, Any]) -> str:
    """The actor's profile: its ``profile`` option, else scheduled for a cron actor, else guaranteed."""
    profile = actor.options.get(opt.PROFILE)
    if profile is not None:
        return str(profile)
    return "scheduled" if opt.PERIODIC in actor.options else DEFAULT_PROFILE


def summary(actor: dramatiq.Actor[Any, Any]) -> str:
    """What the actor's profile does, in one line with its parameters."""
    options = actor.options
    return SUMMARIES[profile_of(actor)].format(
        missed=options.get(opt.MISSED),
        lease=options.get(opt.LEASE, 0),
        on_lost=options.get(opt.ON_LOST),
        periodic=options.get(opt.PERIODIC),
    )


def apply_profile(actor: dramatiq.Actor[Any, Any], config: ProfilesConfig) -> None:
    """Check the actor's profile options and fill in the profile's defaults (in ``actor.options``).

    Raises:
        InvalidActorOption: Naming the actor, the option and what to write instead.
    """
    options = actor.options
    name = actor.actor_name
    profile = profile_of(actor)
    if profile not in PROFILES:
        raise InvalidActorOption(f"Actor {name!r}: profile={profile!r} is not one of {', '.join(PROFILES)}.")
    for owner, owned in _OWN_OPTIONS.items():
        stray = [option for option in owned if option in options and owner != profile]
        if stray:
            raise InvalidActorOption(
                f"Actor {name!r}: {', '.join(stray)} only apply to profile={owner!r}, and this actor is {profile!r}."
            )
    if profile == "guaranteed" and opt.PROFILE in options and options.get(opt.IDEMPOTENCY_KEY) is None:
        raise InvalidActorOption(
            f"Actor {name!r} is declared profile='guaranteed' but has no idempotency_key, so a redelivered "
            "message would run twice. Give idempotency_key='...' or a function of the actor's arguments "
            "(lambda order_id, **_: f'charge-{order_id}'), or choose another profile."
        )
    if profile == "fire_and_forget":
        options.setdefault(opt.MAX_RETRIES, config.fire_and_forget_max_retries)
    elif profile == "ordered":
        _check_ordered(actor, config)
    elif profile == "scheduled":
        if opt.PERIODIC not in options:
            raise InvalidActorOption(
                f"Actor {name!r} is profile='scheduled' but has no schedule: add periodic=cron('0 2 * * *') "
                "(from periodiq import cron)."
            )
        _check_choice(name, opt.MISSED, options.setdefault(opt.MISSED, "skip"), ("skip", "catch_up"))
    elif profile == "long_running":
        lease = options.setdefault(opt.LEASE, config.long_running_lease_s)
        if not isinstance(lease, int | float) or isinstance(lease, bool) or lease < 1:
            raise InvalidActorOption(f"Actor {name!r}: lease_s={lease!r} must be a number of seconds >= 1.")
        _check_choice(name, opt.ON_LOST, options.setdefault(opt.ON_LOST, "retry"), ("retry", "fail"))
        if actor.queue_name == "default":
            # Its own Dramatiq queue, so a worker started with --queues keeps long jobs apart.
            actor.queue_name = config.long_running_queue
    options[opt.PROFILE] = profile


def _check_choice(actor_name: str, option: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidActorOption(f"Actor {actor_name!r}: {option}={value!r} must be one of {', '.join(choices)}.")


def _check_ordered(actor: dramatiq.Actor[Any, Any], config: ProfilesConfig) -> None:
    options = actor.options
    name = actor.actor_name
    key = options.get(opt.ORDERING_KEY)
    parameters = inspect.signature(actor.fn).parameters
    if key is None or not (callable(key) or (isinstance(key, str) and key in parameters)):
        raise InvalidActorOption(
            f"Actor {name!r} is profile='ordered' but ordering_key={key!r} names none of its parameters "
            f"({', '.join(parameters) or 'none'}): give the parameter whose value orders the messages "
            "(ordering_key='user_id') or a function of the arguments."
        )
    partitions = options.setdefault(opt.PARTITIONS, config.ordered_partitions)
    if type(partitions) is not int or not 1 <= partitions <= 1024:
        raise InvalidActorOption(f"Actor {name!r}: partitions={partitions!r} must be a whole number from 1 to 1024.")
    if options.get(opt.SUBSCRIBE):
        raise InvalidActorOption(
            f"Actor {name!r}: an ordered actor cannot subscribe to events (an event's topic cannot pick a "
            "partition). Subscribe a plain actor that calls this one with .send(), or send to it directly."
        )
    options.setdefault(opt.MAX_BACKOFF, int(config.ordered_max_backoff_s * 1000))


def ordering_key(actor: dramatiq.Actor[Any, Any], message: dramatiq.Message[Any]) -> str:
    """The ordering key of a message to an ordered actor (its own option first, then the actor's).

    Raises:
        DefinitionError: The key cannot be taken from the message's arguments.
    """
    key: str | Callable[..., Any] = message.options.get(opt.ORDERING_KEY) or actor.options[opt.ORDERING_KEY]
    if message.options.get(opt.ORDERING_KEY) is not None:
        return str(key)
    try:
        arguments = inspect.signature(actor.fn).bind(*message.args, **message.kwargs).arguments
        return str(key(**arguments) if callable(key) else arguments[key])
    except Exception as e:
        raise DefinitionError(
            f"The ordering key of actor {actor.actor_name!r} cannot be taken from the message's arguments "
            f"({type(e).__name__}: {e})."
        ) from None


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key``: a stable hash (the same in every process and Python version)."""
    return zlib.crc32(key.encode()) % partitions
