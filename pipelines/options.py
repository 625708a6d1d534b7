"""Names of the message and actor options this package reads and writes.

Dramatiq keeps all message metadata in ``Message.options``; these constants are the only place the
keys are spelled, so a typo is a NameError rather than a silently ignored option.
"""

from __future__ import annotations

from typing import Final

#: Message option: where a pipeline step sits in its run (see ``pipelines.plan.StepAddress``).
STEP: Final = "pipeline_step"
#: Message option: per-actor branch data of a message the work exchange copies to several queues.
BRANCHES: Final = "pipeline_branches"
#: Message option: the topic of a domain event.
EVENT_TOPIC: Final = "event_topic"
#: Message option: when (epoch milliseconds) a delayed message is due.
ETA: Final = "eta"
#: Message option: the name of the registered pipeline a step belongs to.
PIPELINE: Final = "pipeline_name"

#: Actor option: topic patterns (``order.*``, ``#``) whose events the actor receives.
SUBSCRIBE: Final = "subscribe"
#: Actor/message option (Dramatiq's own): do not append the previous step's result to the arguments.
PIPE_IGNORE: Final = "pipe_ignore"
