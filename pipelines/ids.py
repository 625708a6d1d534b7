"""Ids typed short: a unique prefix of a run's or a dead letter's id stands for the whole id, as in git
and docker (the web console shows the first 12 or 16 characters)."""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.errors import AmbiguousId

#: Candidates an ambiguous prefix names, at most.
CANDIDATES_SHOWN = 10


def full_id(given: str, ids: Iterable[str], *, what: str) -> str:
    """The id ``given`` stands for: an id equal to it, else the one id that begins with it, else
    ``given`` itself (for the caller's own "not found").

    Raises:
        AmbiguousId: Several ids begin with ``given`` and none equals it.
    """
    starting = sorted({found for found in ids if found.startswith(given)})
    if given in starting or not starting:
        return given
    if len(starting) == 1:
        return starting[0]
    shown = ", ".join(starting[:CANDIDATES_SHOWN]) + (", ..." if len(starting) > CANDIDATES_SHOWN else "")
    raise AmbiguousId(f"{given!r} begins the ids of {len(starting)} {what}s ({shown}); give more of the id.")
