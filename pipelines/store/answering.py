"""What Redis's failures mean for the run store: each one the caller can act on becomes a
:class:`~pipelines.errors.StoreUnavailable` that says what to do (a refused login, a missing database,
no answer, or an error reply Redis gives while it cannot serve for a while), with a hint for the kind of
Redis the URL names: one server, a Redis Cluster or a primary behind Sentinel."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import redis
from redis.sentinel import MasterNotFoundError

from pipelines.config.masking import mask_url
from pipelines.config.redis_urls import is_cluster_url, is_sentinel_url
from pipelines.errors import StoreUnavailable

#: Error replies Redis gives while it cannot serve for a while (it may, a moment later): loading its data,
#: a replica that is read-only or has lost its master, a script running too long, out of memory, a
#: cluster failing over. LOADING arrives as redis-py's BusyLoadingError, a ConnectionError.
TRANSIENT_REPLIES = ("READONLY", "BUSY", "OOM", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "LOADING")
#: What to try when Redis does not answer, by the kind of Redis store.url names.
NO_ANSWER_HINTS = {
    "server": "Is it running? Try `docker compose up -d redis`, or set store.url in config.toml.",
    "cluster": "Are its nodes running? store.url must name at least one node that answers.",
    "sentinel": "Is the primary the sentinels name running, and reachable from here at the address they give?",
}


def _kind(url: str) -> str:
    """The kind of Redis ``url`` names: ``server``, ``cluster`` or ``sentinel``."""
    return "cluster" if is_cluster_url(url) else "sentinel" if is_sentinel_url(url) else "server"


def _refused_login(url: str, error: BaseException) -> StoreUnavailable:
    where = "Redis Cluster" if is_cluster_url(url) else "Redis"
    return StoreUnavailable(
        f"{where} at {mask_url(url)} refused the login ({error}). Check the user name and password "
        "in store.url (or PIPELINES_STORE__URL)."
    )


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
        raise _refused_login(url, e) from None
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
        if isinstance(e.__cause__, redis.AuthenticationError):  # the nodes answered, and said no
            raise _refused_login(url, e.__cause__) from None
        raise StoreUnavailable(
            f"Redis Cluster at {mask_url(url)} does not answer ({e}). {NO_ANSWER_HINTS['cluster']}"
        ) from None
    except MasterNotFoundError:
        raise StoreUnavailable(
            f"Redis at {mask_url(url)}: no sentinel named there answered with a primary by that name. Are the "
            "sentinels running, and do they monitor it (SENTINEL get-master-addr-by-name <name>)?"
        ) from None
    except (redis.ConnectionError, redis.TimeoutError) as e:
        where = "Redis Cluster" if is_cluster_url(url) else "Redis"
        raise StoreUnavailable(
            f"{where} at {mask_url(url)} does not answer ({e}). {NO_ANSWER_HINTS[_kind(url)]}"
        ) from None
