"""Masking secrets in what is printed or logged: passwords in URLs, in their queries and in free text.

Kept apart from the configuration so that logging can mask without importing pydantic, pika or redis.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_SECRET_QUERY_KEYS = frozenset({"password", "pass", "secret", "token"})


#: ``user:password@`` anywhere, for what does not parse as a URL (a scheme typo such as ``amqp//``).
_USERINFO = re.compile(r"(?P<user>[^\s:/@'\"]*):(?P<password>[^\s/@'\"]+)@")


def mask_url(url: str) -> str:
    """Hide the password of a URL (in its user info or a ``password=`` query) so it can be printed; of
    each URL in a comma-separated list of them (a cluster's nodes)."""
    if url.count("://") > 1 and "," in url:
        return ",".join(mask_url(part) for part in url.split(","))
    parts = urlsplit(url)
    if not parts.netloc:
        return _USERINFO.sub(r"\g<user>:***@", url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    netloc = parts.netloc
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    query = "&".join(
        f"{key}=***" if sep and key.lower() in _SECRET_QUERY_KEYS else f"{key}{sep}{value}"
        for key, sep, value in (item.partition("=") for item in parts.query.split("&") if item)
    )
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def mask_text(text: str) -> str:
    """``text`` with every URL in it masked (log lines, error messages)."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda match: mask_url(match.group(0)), text)
    return _USERINFO.sub(r"\g<user>:***@", text) if "@" in text else text


def mask_secrets(value: Any) -> Any:
    """``value`` with :func:`mask_url` applied to every string in it that looks like a URL."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {key: mask_secrets(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(item) for item in value]
    return value
