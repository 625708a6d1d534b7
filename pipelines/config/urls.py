"""Checks of the broker's and the store's URLs, as their clients will read them: a bad URL is a config
error naming what is expected, found when the settings load, not a traceback at the first connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import urlsplit

import pika

from pipelines.config.masking import mask_text
from pipelines.config.redis_urls import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    is_cluster_url,
    is_sentinel_url,
    parse_cluster_url,
    parse_sentinel_url,
)


def check_url(url: str, schemes: tuple[str, ...]) -> str:
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ValueError(f"expected a URL starting with {' or '.join(s + '://' for s in schemes)}")
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ValueError("expected a URL whose port is a number") from None
    return url


def check_amqp_url(url: str) -> str:
    """The URL as pika reads it: a bad query parameter is a config error, not a traceback at connect."""
    if check_url(url, ("amqp", "amqps", "memory")).startswith("memory://"):
        return url
    try:
        pika.URLParameters(url)
    except (ValueError, TypeError, SyntaxError) as e:
        raise ValueError(f"expected a RabbitMQ URL that pika accepts ({mask_text(str(e))})") from None
    return url


#: Whether a URL is also checked by building its client's connection (see ``without_client_checks``).
_client_checks: ContextVar[bool] = ContextVar("client_checks", default=True)


@contextmanager
def without_client_checks() -> Iterator[None]:
    """Check the store's URL by its syntax only: for a process that never uses the store (a worker's
    metrics process) and need not load redis-py, whose import costs about 20 MB."""
    token = _client_checks.set(False)
    try:
        yield
    finally:
        _client_checks.reset(token)


def check_redis_url(url: str) -> str:
    """The URL as redis-py reads it, with the database a number (redis-py would quietly use 0)."""
    if is_cluster_url(url):
        parse_cluster_url(url)
        return url
    if is_sentinel_url(url):
        parse_sentinel_url(url)
        return url
    if check_url(url, ("redis", "rediss", "memory", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)).startswith("memory://"):
        return url
    database = urlsplit(url).path.strip("/")
    if database and not database.isdigit():
        raise ValueError("expected the database as a number after the host, like redis://host:6379/0")
    if not _client_checks.get():
        return url
    import redis  # here, not at the top: see without_client_checks

    try:
        redis.ConnectionPool.from_url(url).make_connection()  # builds the connection, does not connect
    except (ValueError, TypeError) as e:
        raise ValueError(f"expected a Redis URL that redis-py accepts ({mask_text(str(e))})") from None
    return url


def split_urls(url: str) -> tuple[str, ...]:
    """The comma-separated URLs of ``url`` (a cluster's nodes), stripped of spaces."""
    nodes = tuple(node.strip() for node in url.split(","))
    if not all(nodes):
        raise ValueError("expected URLs separated by single commas, none of them empty")
    return nodes
