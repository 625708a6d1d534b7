"""What stands between a browser and the console's actions.

* **Host**: the console answers only to the host names in ``[ui] allowed_hosts`` (400 otherwise), so a
  page on another site cannot reach it by rebinding its own name to 127.0.0.1 and read runs.
* **Token**: a request that changes state (anything but GET and HEAD) carries ``Authorization: Bearer
  <[ui] token>``; without it, or with another, 401. No token configured refuses every action. A client
  that sent :data:`WRONG_TOKENS_ALLOWED` wrong tokens within :data:`WRONG_TOKEN_WINDOW_S` gets 429 until
  the window has passed, so a token cannot be guessed at the speed of the network.
* **Cross-site requests**: the token travels in a header the page's script adds, never in a cookie, so a
  request another site makes the browser send has no token; a custom header also makes the browser ask
  first (CORS preflight), which the console never allows. A request whose ``Origin`` is another site's,
  or that the browser marks cross-site (``Sec-Fetch-Site``), is refused (403) before its token is read;
  an origin is its scheme, host and port, all three compared.
* **Headers**: a Content-Security-Policy that runs only the console's own script and styles (no inline
  script: a value that escaped escaping would still not run), no framing, no referrer, no sniffing.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD"})
#: Wrong tokens one client may send within :data:`WRONG_TOKEN_WINDOW_S` before it is made to wait.
WRONG_TOKENS_ALLOWED = 5
WRONG_TOKEN_WINDOW_S = 60.0
#: Clients whose wrong tokens are remembered at most (the oldest are forgotten first).
CLIENTS_REMEMBERED = 1024
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _host_name(host: str) -> str:
    return (urlsplit(f"//{host}").hostname or "").lower()


class Guard:
    """ASGI middleware applying the rules of the module docstring to every request."""

    def __init__(self, app: ASGIApp, *, token: str, allowed_hosts: Collection[str]) -> None:
        self.app = app
        self.token = token.encode()
        self.allowed_hosts = {name.lower().strip("[]") for name in allowed_hosts}
        self._wrong: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            status, text = refusal
            extra = {"www-authenticate": 'Bearer realm="pipelines console"'} if status == 401 else {}
            if status == 429:
                extra = {"retry-after": str(int(WRONG_TOKEN_WINDOW_S))}
            await JSONResponse({"error": text}, status_code=status, headers={**HEADERS, **extra})(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                present = {name.lower() for name, _ in headers}
                headers.extend(
                    (name.encode(), value.encode()) for name, value in HEADERS.items() if name.encode() not in present
                )
            await send(message)

        await self.app(scope, receive, with_headers)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """Why this request is refused (status, sentence), or None."""
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if _host_name(host) not in self.allowed_hosts:
            return 400, f"This console does not answer to host {host!r}; add it to [ui] allowed_hosts."
        if scope["method"] in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        scheme = scope.get("scheme", "http")
        other_origin = origin is not None and (
            urlsplit(origin).netloc.lower() != host.lower() or urlsplit(origin).scheme.lower() != scheme
        )
        if other_origin or headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return 403, "Cross-site request refused: actions are taken from the console's own pages."
        return self._token_refusal(scope, headers)

    def _token_refusal(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        if not self.token:
            return 401, "Actions are disabled: no token is set. Set [ui] token (PIPELINES_UI__TOKEN) and restart."
        client = (scope.get("client") or ("?", 0))[0]
        if self._too_many_wrong(client):
            return 429, f"Too many wrong tokens from {client}: try again in {WRONG_TOKEN_WINDOW_S:.0f} s."
        kind, _, given = headers.get("authorization", "").partition(" ")
        if kind.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            self._count_wrong(client)
            return 401, "This action needs the console's token (Authorization: Bearer <[ui] token>)."
        return None

    def _too_many_wrong(self, client: str) -> bool:
        with self._lock:
            wrong = self._wrong.get(client)
            if wrong is None:
                return False
            while wrong and time.monotonic() - wrong[0] > WRONG_TOKEN_WINDOW_S:
                wrong.popleft()
            return len(wrong) >= WRONG_TOKENS_ALLOWED

    def _count_wrong(self, client: str) -> None:
        with self._lock:
            wrong = self._wrong.pop(client, None) or deque(maxlen=WRONG_TOKENS_ALLOWED)
            wrong.append(time.monotonic())
            self._wrong[client] = wrong
            while len(self._wrong) > CLIENTS_REMEMBERED:
                self._wrong.popitem(last=False)
