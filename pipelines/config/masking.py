"""Masking secrets in what is printed or logged: passwords in URLs, in their queries and in free text.

A URL's password is everything between the ``:`` after its user name and the *last* ``@`` after its
``://``: passwords are often not percent-encoded and hold ``/``, ``'``, spaces or ``@`` (base64 ones do).
A scheme with a typo that lost one character of its ``://`` (``redis//``, ``amqp:/``) starts a URL
too. In free text a URL has no clear end, so from each start the last ``@`` on the same line, before
the next URL, ends its user info: a line may be masked more than it needs, never less. A lone URL with
no scheme at all is masked the same way. In free text with no scheme, ``user:password@`` is masked up
to the last ``@`` of the word: there a space cannot be told from the end of a password.

Kept apart from the configuration so that logging can mask without importing pydantic, pika or redis.
"""

from __future__ import annotations

import re
from typing import Any

_SECRET_QUERY_KEYS = frozenset({"password", "pass", "secret", "token"})
#: ``user:password@`` in free text with no scheme: the password runs to the last ``@`` of the word.
_USERINFO = re.compile(r"(?P<user>[^\s:/@'\"]*):(?P<password>\S+)@")
#: Where a URL starts: its scheme and ``://``, or a typo of it that lost one character (``//``, ``:/``).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(?::/{1,2}|//)")
#: A secret in a URL's query (``?password=...``), wherever the URL ends.
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&](?:" + "|".join(sorted(_SECRET_QUERY_KEYS)) + r"))=(?P<value>[^&#\s'\"<>]*)", re.IGNORECASE
)
MASK = "***"


def mask_url(url: str) -> str:
    """Hide the password of a URL (in its user info or a ``password=`` query) so it can be printed; of
    each URL in a comma-separated list of them (a cluster's nodes)."""
    if url.count("://") > 1 and "," in url:
        return ",".join(mask_url(part) for part in url.split(","))
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme is not None else 0
    return url[:start] + _secret_queries(_userinfo_masked(url[start:]))


def mask_text(text: str) -> str:
    """``text`` with the password of every URL in it masked (log lines, error messages, tracebacks)."""
    if "//" in text or ":/" in text:
        return "\n".join(_mask_line(line) for line in text.split("\n"))
    return _userinfo_words_masked(text)


def mask_secrets(value: Any) -> Any:
    """``value`` with :func:`mask_text` applied to every string in it, at any depth."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {key: mask_secrets(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(item) for item in value]
    return value


def _mask_line(line: str) -> str:
    matches = list(_SCHEME.finditer(line))
    if not matches:
        return _userinfo_words_masked(line)
    pieces = [_userinfo_words_masked(line[: matches[0].start()])]
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(line)
        pieces.append(match.group(0) + _secret_queries(_userinfo_masked(line[match.end() : end])))
    return "".join(pieces)


def _userinfo_masked(rest: str) -> str:
    """What follows ``scheme://`` (or a lone URL with no scheme), with everything from the first ``:``
    to the last ``@`` masked."""
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return rest
    return f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"


def _userinfo_words_masked(text: str) -> str:
    """Free text with no URL start in it, with the password of each ``user:password@`` masked."""
    return _USERINFO.sub(rf"\g<user>:{MASK}@", text) if "@" in text else text


def _secret_queries(text: str) -> str:
    return _SECRET_QUERY.sub(lambda m: f"{m.group('key')}={MASK}" if m.group("value") else m.group(0), text)
