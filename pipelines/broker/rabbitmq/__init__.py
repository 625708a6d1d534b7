"""The RabbitMQ broker: Dramatiq's ``RabbitmqBroker`` connected through exchanges.

Dramatiq publishes to one queue per Dramatiq queue name on the default exchange. This broker keeps
Dramatiq's actors, middleware and worker, and changes where messages go (see ``pipelines.wire.topology``):
one queue per actor, bound to the namespace's work exchange by the actor's name, so one publish can
reach several actors (a fan-out) and an event reaches every subscriber. A Dramatiq queue name becomes
the group of actor queues one consumer thread serves, so ``dramatiq actors --queues reports`` still
means what it says. Delays wait in tiered delay queues in RabbitMQ, never in a worker's memory.

Its parts, one job each: ``broker`` (what Dramatiq and the middleware call), ``connections``,
``declaring``, ``publishing`` over ``confirms``, ``consuming`` with ``settling``, and
``dead_letters`` (the dead-letter administration of ``pipelines.dead_letters.reasons.DeadLetterAdmin``).
"""

from __future__ import annotations

from pipelines.broker.rabbitmq.broker import ExchangeBroker

__all__ = ["ExchangeBroker"]
