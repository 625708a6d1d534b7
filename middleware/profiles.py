"""Checks each actor's profile and flow options when it is declared and fills in the profile's defaults.

The profile itself is data on the actor (see ``pipelines.profiles``): the brokers read it to declare
queues and route messages, ``Backoff`` to retry in place or drop, ``Leases`` and ``Schedules`` to own
long jobs and claim ticks. This middleware only makes sure it is valid before any of them looks.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from pipelines import options as opt
from pipelines.config.sections import ProfilesConfig
from pipelines.errors import InvalidActorOption
from pipelines.profiles.kinds import apply_profile
from pipelines.wire.rates import parse_rate


class Profiles(Middleware):
    """Validates profile options at declaration (see the module docstring)."""

    def __init__(self, *, config: ProfilesConfig) -> None:
        self.config = config

    @property
    def actor_options(self) -> set[str]:
        return {
            opt.PROFILE,
            opt.PARTITIONS,
            opt.ORDERING_KEY,
            opt.MISSED,
            opt.LEASE,
            opt.ON_LOST,
            opt.RATE_LIMIT,
            opt.MAX_LENGTH,
        }

    def before_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        apply_profile(actor, self.config)
        owner = f"Actor {actor.actor_name!r}"
        if opt.RATE_LIMIT in actor.options:
            parse_rate(actor.options[opt.RATE_LIMIT], owner=owner)
        length = actor.options.get(opt.MAX_LENGTH)
        if length is not None and (type(length) is not int or length < 1):
            raise InvalidActorOption(f"{owner}: max_length={length!r} must be a whole number of messages >= 1.")
