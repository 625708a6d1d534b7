"""Remembering which deliveries were dead-lettered, so that a redelivered copy is not dead-lettered again.

A dead letter is published, then the delivery acknowledged; if the channel dies between the two, the
delivery comes back (``redelivered``). :class:`DeadLetterMarks` remembers every dead letter for a day
by its queue and body in the run store, so the redelivered copy is acknowledged without a second dead
letter. The marks are best effort: while the run store does not answer, a dead letter is not
remembered and a redelivered copy counts as not seen, so it is handled as a first delivery (and may be
dead-lettered a second time).
"""

from __future__ import annotations

import hashlib
import logging

from pipelines.store.roles import OnceMarks

logger = logging.getLogger(__name__)

#: How long a dead letter is remembered against redelivered copies, in seconds.
MARK_RETENTION_S = 86_400


class DeadLetterMarks:
    """Which deliveries were dead-lettered already, by queue and body, in the run store."""

    def __init__(self, marks: OnceMarks | None) -> None:
        self.marks = marks

    @staticmethod
    def _key(queue: str, body: bytes) -> str:
        return f"dead-letter:{queue}:{hashlib.blake2b(body, digest_size=16).hexdigest()}"

    def remember(self, queue: str, body: bytes) -> None:
        """Record that this delivery was dead-lettered (best effort: a copy may then be dead-lettered twice)."""
        if self.marks is None:
            return
        try:
            self.marks.mark_once(self._key(queue, body), retention_s=MARK_RETENTION_S)
        except Exception as e:  # the dead letter is out: nothing the store answers may stop its ack
            logger.warning("Could not remember a dead letter of %s (%s); a redelivery may repeat it.", queue, e)

    def seen(self, queue: str, body: bytes) -> bool:
        """Whether this delivery was dead-lettered already (asked only of redelivered ones)."""
        if self.marks is None:
            return False
        try:
            return self.marks.is_marked(self._key(queue, body))
        except Exception as e:  # asked on the consumer's thread: an error here would restart the consumer
            logger.warning(
                "Could not check whether a redelivery of %s was dead-lettered (%s); taking it as new.", queue, e
            )
            return False
