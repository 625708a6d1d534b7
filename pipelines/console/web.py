"""The console's pages, rendered on the server, and the Starlette application that serves them with the API.

Every page has a live part: the page's script asks for it again (``?partial=1``) every ``[ui]
refresh_s`` seconds and swaps it in, so runs arrive and steps change colour without a reload. Actions
go to the JSON API. Templates escape everything they print (Jinja2 autoescaping): what comes from a
run or a message is text, never markup.
"""

from __future__ import annotations

import time
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import jinja2
import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pipelines.app import App
from pipelines.console import api
from pipelines.console.data import ConsoleData
from pipelines.console.security import HEADERS, Guard
from pipelines.errors import (
    AmbiguousId,
    DeadLetterNotFound,
    InvalidQuery,
    PipelinesError,
    RunNotFound,
    ServiceUnavailable,
)
from pipelines.payloads.sealing import SEALED_KEY

#: What a value that is not known (yet) shows as: an en dash.
MISSING = "\u2013"
#: Members of a parallel node shown before the rest fold (``expand`` shows ten times as many).
FOLD_AT = 8
#: Pages with a live part (``_<page>.html``), asked for again with ``?partial=1``.
LIVE_PAGES = frozenset({"runs", "run", "dead_letters", "queues", "problem"})
#: Run states, in the order the filter offers them.
RUN_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
#: Time ranges the runs filter offers: started since, and started before.
SINCE_CHOICES = (
    ("", "any time"),
    ("15m", "last 15 minutes"),
    ("1h", "last hour"),
    ("24h", "last day"),
    ("7d", "last week"),
)
UNTIL_CHOICES = (
    ("", "now"),
    ("15m", "15 minutes ago"),
    ("1h", "an hour ago"),
    ("24h", "a day ago"),
    ("7d", "a week ago"),
)
#: The runs filter's fields (a filtered list says so, and offers to clear them).
FILTERS = ("state", "pipeline", "since", "until", "key")


def _unsealed_view(value: Any) -> Any:
    """``value`` with each sealed value shown as a marker (the console holds no keys to open it)."""
    if isinstance(value, dict):
        if set(value) == {SEALED_KEY}:
            return "🔒 sealed"
        return {key: _unsealed_view(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unsealed_view(item) for item in value]
    return value


def pretty(value: Any) -> str:
    """A value as indented JSON (sealed values as a marker); a JSON text is parsed first."""
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return str(value)
    return orjson.dumps(_unsealed_view(value), option=orjson.OPT_INDENT_2).decode()


def ago(epoch: float | None, *, ms: bool = True) -> str:
    """How long ago, for people: "4 s ago", "12 min ago", "3 h ago", "2 d ago"."""
    if not epoch:
        return MISSING
    seconds = max(0.0, time.time() - (epoch / 1000 if ms else epoch))
    return f"{seconds_text(seconds)} ago"


def seconds_text(seconds: float | None) -> str:
    """A duration for people: "850 ms", "4.2 s", "12 min", "3.5 h"."""
    if seconds is None:
        return MISSING
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def stamp(epoch_ms: int | None) -> str:
    """An exact UTC time, for titles and the run header."""
    if not epoch_ms:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock(epoch_ms: int) -> str:
    """A UTC time of day to the millisecond, for log records."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pipelines.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters |= {"pretty": pretty, "ago": ago, "seconds": seconds_text, "stamp": stamp, "clock": clock}
    return env


async def _find_run(request: Request) -> Response:
    """The runs page's id box: to the run's page, which takes the start of an id too."""
    given = urllib.parse.quote(request.query_params.get("id", "").strip())
    return RedirectResponse(f"/runs/{given}" if given else "/runs", status_code=303)


def _status(error: PipelinesError) -> int:
    """A page's status for an id that names nothing (404) or several runs or dead letters (400)."""
    return 400 if isinstance(error, AmbiguousId) else 404


def build_console(app: App, *, host: str | None = None) -> Starlette:
    """The console for ``app``: pages, ``/api/``, static files, behind :class:`~pipelines.console.security.Guard`.

    ``host``, the address it listens on, is a name it answers to as well (unless a wildcard address).
    """
    data = ConsoleData(app)
    env = _environment()
    ui = app.settings.ui
    common = {
        "namespace": app.settings.namespace,
        "broker": app.settings.broker.masked_url,
        "refresh_ms": int(ui.refresh_s * 1000),
        "actions_enabled": bool(ui.token),
    }

    def render(request: Request, page: str, status: int = 200, **context: Any) -> Response:
        partial = request.query_params.get("partial") == "1" and page in LIVE_PAGES
        template = env.get_template(f"_{page}.html" if partial else f"{page}.html")
        html = template.render(**common, **context, page=page, request=request, query=request.query_params)
        return HTMLResponse(html, status_code=status)

    def problem(request: Request, status: int, text: str) -> Response:
        return render(request, "problem", status, title="Not here", text=text)

    async def runs(request: Request) -> Response:
        try:
            where = api.run_filter(request)
        except api.BadRequest as e:
            return problem(request, 400, str(e))
        cursor = request.query_params.get("cursor") or None
        try:
            page = await run_in_threadpool(data.runs, where, limit=25, cursor=cursor)
        except InvalidQuery as e:
            return problem(request, 400, str(e))
        return render(
            request,
            "runs",
            runs=page,
            states=RUN_STATES,
            since_choices=SINCE_CHOICES,
            until_choices=UNTIL_CHOICES,
            filtered=any(request.query_params.get(name) for name in FILTERS),
            pipelines=data.pipelines(),
            live=cursor is None,
        )

    async def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        expand = tuple(request.query_params.getlist("expand"))
        try:
            view = await run_in_threadpool(data.run, run_id, fold_at=FOLD_AT, expand=expand)
        except (RunNotFound, AmbiguousId) as e:
            return problem(request, _status(e), str(e))
        node = request.query_params.get("step") or view.failed_step
        detail = await run_in_threadpool(data.step, view, node) if node else None
        return render(request, "run", run=view, detail=detail, expand=expand)

    async def dead_letters(request: Request) -> Response:
        queue = request.query_params.get("queue") or None
        reason = request.query_params.get("reason") or None
        try:
            letters = await run_in_threadpool(lambda: data.dead_letters(queue=queue, reason=reason))
        except PipelinesError as e:
            return problem(request, 400, str(e))
        by_queue: dict[str, list[Any]] = {}
        for letter in letters:
            by_queue.setdefault(letter.queue, []).append(letter)
        return render(
            request,
            "dead_letters",
            by_queue=by_queue,
            total=len(letters),
            queues=data.dead_letter_queues(),
            reasons=sorted({letter.reason for letter in letters} | ({reason} if reason else set())),
            queue=queue,
            reason=reason,
        )

    async def dead_letter(request: Request) -> Response:
        try:
            letter = await run_in_threadpool(data.dead_letter, request.path_params["letter_id"])
        except (DeadLetterNotFound, AmbiguousId) as e:
            return problem(request, _status(e), str(e))
        return render(request, "dead_letter", letter=letter)

    async def queues(request: Request) -> Response:
        return render(request, "queues", overview=await run_in_threadpool(data.overview))

    async def home(request: Request) -> Response:
        return RedirectResponse("/runs", status_code=303)

    async def unavailable(request: Request, error: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return api.json_response({"error": str(error)}, 503)
        return render(request, "problem", 503, title="A service does not answer", text=str(error))

    async def failed(request: Request, error: Exception) -> Response:
        # Answered outside the Guard (Starlette's last resort): the security headers are added here.
        text = "The console met an error it did not expect; its log has the details."
        if request.url.path.startswith("/api/"):
            response = api.json_response({"error": text}, 500)
        else:
            response = render(request, "problem", 500, title="Something went wrong", text=text)
        response.headers.update(HEADERS)
        return response

    hosts = {*ui.allowed_hosts, *([host] if host and host not in ("0.0.0.0", "::") else [])}
    return Starlette(
        routes=[
            Route("/", home),
            Route("/runs", runs),
            Route("/runs/find", _find_run),  # before the run's own route, which would take "find" for an id
            Route("/runs/{run_id}", run),
            Route("/dead-letters", dead_letters),
            Route("/dead-letters/{letter_id}", dead_letter),
            Route("/queues", queues),
            *api.routes(data),
            Mount("/static", StaticFiles(packages=[("pipelines.console", "static")]), name="static"),
        ],
        middleware=[Middleware(Guard, token=ui.token, allowed_hosts=hosts)],
        exception_handlers={ServiceUnavailable: unavailable, Exception: failed},
    )
