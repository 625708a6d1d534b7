"""Checks of the broker's and the store's URLs, as their clients will read them: a bad URL is a config
error naming what is expected, found when the settings load, not a traceback at the first connection."""

from __future__ import annotations

import re
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
    schemes = ("redis", "rediss", "memory", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES, *POSTGRES_SCHEMES)
    if check_url(url, schemes).startswith("memory://"):
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


#: URL schemes of a PostgreSQL run store.
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: The schema names a PostgreSQL store accepts: a plain identifier (it is quoted in every statement).
SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,49}")


def is_postgres_url(url: str) -> bool:
    return urlsplit(url).scheme in POSTGRES_SCHEMES


def check_store_url(url: str) -> str:
    """A run store's URL: PostgreSQL's (``postgresql://user@host:5432/database``, or libpq's several hosts,
    ``postgresql://user@db1:5432,db2:5432/database?target_session_attrs=read-write``), or Redis's as
    :func:`check_redis_url` reads it."""
    if not is_postgres_url(url):
        return check_redis_url(url)
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2].split(",")
    if len(hosts) > 1 and not all(hosts):
        raise ValueError("expected hosts separated by single commas, like postgresql://user@db1:5432,db2:5432/app")
    for host in hosts:  # each host's port is a number
        check_url(f"{parts.scheme}://{host}", POSTGRES_SCHEMES)
    if not urlsplit(url).path.strip("/"):
        raise ValueError("expected the database after the host, like postgresql://user@host:5432/app")
    return url


def check_schema_name(schema: str) -> str:
    """A PostgreSQL schema name the store accepts."""
    if SCHEMA_NAME.fullmatch(schema) is None:
        raise ValueError(
            "expected a schema name of letters, digits and underscores, not starting with a digit, 50 at most"
        )
    return schema


def split_urls(url: str) -> tuple[str, ...]:
    """The comma-separated URLs of ``url`` (a cluster's nodes), stripped of spaces."""
    nodes = tuple(node.strip() for node in url.split(","))
    if not all(nodes):
        raise ValueError("expected URLs separated by single commas, none of them empty")
    return nodes
