"""What Redis's failures mean for the run store: each one the caller can act on becomes a
:class:`~pipelines.errors.StoreUnavailable` that says what to do (a refused login, a missing database,
no answer, or an error reply Redis gives while it cannot serve for a while)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import redis
from redis.sentinel import MasterNotFoundError

from pipelines.config.masking import mask_url
from pipelines.errors import StoreUnavailable

#: Error replies Redis gives while it cannot serve for a while (it may, a moment later): loading its data,
#: a replica that is read-only or has lost its master, a script running too long, out of memory, a
#: cluster failing over. LOADING arrives as redis-py's BusyLoadingError, a ConnectionError.
TRANSIENT_REPLIES = ("READONLY", "BUSY", "OOM", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "LOADING")


def _transient_reply(error: redis.ResponseError) -> bool:
    return str(error).split(" ", 1)[0] in TRANSIENT_REPLIES or isinstance(
        error,
        redis.exceptions.ReadOnlyError
        | redis.exceptions.OutOfMemoryError
        | redis.exceptions.ClusterDownError
        | redis.exceptions.TryAgainError,
    )


@contextmanager
def answering(url: str) -> Iterator[None]:
    """Redis's failures as :class:`StoreUnavailable`, saying what to do; other errors pass."""
    try:
        yield
    except redis.AuthenticationError as e:
        raise StoreUnavailable(
            f"Redis at {mask_url(url)} refused the login ({e}). Check the user name and password "
            "in store.url (or PIPELINES_STORE__URL)."
        ) from None
    except redis.ResponseError as e:
        if _transient_reply(e):
            raise StoreUnavailable(
                f"Redis at {mask_url(url)} cannot serve now ({e}). It is loading, read-only, busy, out "
                "of memory or without its master; the operation is tried again later."
            ) from None
        if "DB index" not in str(e):
            raise
        raise StoreUnavailable(
            f"Redis at {mask_url(url)} has no database {urlsplit(url).path.strip('/')} ({e}). "
            "Use a database number the server has (0-15 by default) in store.url."
        ) from None
    except redis.exceptions.RedisClusterException as e:
        if "cannot be connected" not in str(e):  # the client's own refusal of a command, not an outage
            raise
        raise StoreUnavailable(
            f"Redis Cluster at {mask_url(url)} does not answer ({e}). Are its nodes running? store.url must "
            "name at least one node that answers."
        ) from None
    except MasterNotFoundError:
        raise StoreUnavailable(
            f"Redis at {mask_url(url)}: no sentinel named there answered with a primary by that name. Are the "
            "sentinels running, and do they monitor it (SENTINEL get-master-addr-by-name <name>)?"
        ) from None
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise StoreUnavailable(
            f"Redis at {mask_url(url)} does not answer ({e}). Is it running? "
            "Try `docker compose up -d redis`, or set store.url in config.toml."
        ) from None
