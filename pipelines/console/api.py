"""The console's JSON API under ``/api/``: what the pages show, and the actions they take.

============================================== =======================================================
GET  /api/runs?state&pipeline&since&until&key  runs newest first: ``runs``, ``next_cursor`` (pass it as
     &limit&cursor                             ``cursor`` for older ones); since/until: 15m, 2h, 7d,
                                               ISO 8601 or epoch ms
GET  /api/runs/{id}?fold                       one run: record, steps, counts and ``shape`` (parallel
                                               nodes with more than ``fold`` members folded, default 50)
GET  /api/runs/{id}/steps/{step}               a step's arguments, result and dead letters
POST /api/runs/{id}/cancel                     cancel the run: ``cancelled``, ``state``
POST /api/runs/{id}/rerun                      re-run an ended run with its input: ``rerun_id``
GET  /api/dead-letters?queue&reason&run&limit  dead letters, oldest first per queue
GET  /api/dead-letters/{id}                    one dead letter with its message
POST /api/dead-letters/{id}/replay             replay one: ``outcome``
POST /api/dead-letters/replay  {queue, reason} replay every dead letter of the filter: ``outcomes``
POST /api/dead-letters/purge   {queue, confirm} delete for good (``confirm`` must be true): ``purged``
GET  /api/queues                               queues (depth, dead, rates, oldest age), workers, notes
============================================== =======================================================

Times are epoch milliseconds (``*_ms``), durations seconds (``*_s``). Errors are ``{"error": sentence}``
with 400 (a bad parameter), 401 (no or a wrong token), 403 (cross-site), 404 (no such run or dead
letter), 409 (cannot be done now, such as replaying into an ended run) or 503 (a service is down).
POSTs need ``Authorization: Bearer <[ui] token>`` (see ``pipelines.console.security``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pipelines.console.data import ConsoleData
from pipelines.console.shape import ShapeNode
from pipelines.console.views import RunFilter, RunView
from pipelines.errors import (
    AmbiguousId,
    CannotReplay,
    DeadLetterError,
    DeadLetterNotFound,
    InvalidQuery,
    PipelinesError,
    RunNotFound,
    ServiceUnavailable,
)
from pipelines.flow.run_query import parse_time_ms

#: Most rows one request may ask for.
MAX_LIMIT = 500
#: The most dead letters one answer lists (each one read from RabbitMQ).
MAX_DEAD_LETTERS = 1000
#: A number in a query: ASCII digits, no more than fit comfortably (``str.isdigit`` takes ``²``).
WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")


class BadRequest(Exception):
    """A parameter that cannot be used; its text says which and why (400)."""


def json_response(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value, default=_default), status_code=status, media_type="application/json")


def _default(value: Any) -> Any:
    if isinstance(value, ShapeNode):
        return shape_json(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def shape_json(node: ShapeNode[Any]) -> dict[str, Any]:
    """A shape without the per-node step lists (the run's ``steps`` has them once)."""
    data: dict[str, Any] = {"node": node.node, "kind": node.kind}
    if node.step is not None:
        data["step"] = node.step
    else:
        data |= {"size": node.size, "children": [shape_json(child) for child in node.children]}
        if node.folded is not None:
            data["folded"] = dataclasses.asdict(node.folded)
    return data


def run_json(run: RunView) -> dict[str, Any]:
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name != "shape"}
    return {**fields, "shape": shape_json(run.shape)}


def integer(request: Request, name: str, default: int, *, lowest: int = 1, highest: int = MAX_LIMIT) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if WHOLE_NUMBER.fullmatch(text) is None or not lowest <= int(text) <= highest:
        raise BadRequest(f"{name}={text!r}: expected a whole number from {lowest} to {highest}.")
    return int(text)


def run_filter(request: Request) -> RunFilter:
    """The runs filter of a request's query (empty values match anything)."""
    query = {name: value.strip() for name, value in request.query_params.items() if value.strip()}
    try:
        since = parse_time_ms(query["since"]) if "since" in query else None
        until = parse_time_ms(query["until"]) if "until" in query else None
    except InvalidQuery as e:
        raise BadRequest(str(e)) from None
    return RunFilter(query.get("state"), query.get("pipeline"), since, until, query.get("key"))


async def body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("The request body is not JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    return data


def answering(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turn the errors a handler meets into JSON answers with the status that fits."""

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except (BadRequest, InvalidQuery, AmbiguousId) as e:
            return json_response({"error": str(e)}, 400)
        except (RunNotFound, DeadLetterNotFound) as e:
            return json_response({"error": str(e)}, 404)
        except (CannotReplay, DeadLetterError) as e:
            return json_response({"error": str(e)}, 409 if isinstance(e, CannotReplay) else 400)
        except ServiceUnavailable as e:
            return json_response({"error": str(e)}, 503)
        except PipelinesError as e:
            return json_response({"error": str(e)}, 409)

    return answer


def routes(data: ConsoleData) -> list[Route]:
    """The API's routes, on ``data``; slow calls (RabbitMQ, Redis) run in a worker thread."""

    @answering
    async def runs(request: Request) -> Response:
        where = run_filter(request)
        limit = integer(request, "limit", 25)
        cursor = request.query_params.get("cursor") or None
        page = await run_in_threadpool(data.runs, where, limit=limit, cursor=cursor)
        return json_response({"runs": page.runs, "next_cursor": page.next_cursor})

    @answering
    async def run(request: Request) -> Response:
        fold = integer(request, "fold", 50, highest=100_000)
        view = await run_in_threadpool(data.run, request.path_params["run_id"], fold_at=fold)
        return json_response(run_json(view))

    @answering
    async def step(request: Request) -> Response:
        view = await run_in_threadpool(data.run, request.path_params["run_id"], fold_at=1)
        detail = await run_in_threadpool(data.step, view, request.path_params["node"])
        if detail is None:
            return json_response({"error": f"Run {view.run_id} has no step {request.path_params['node']!r}."}, 404)
        return json_response(detail)

    @answering
    async def cancel(request: Request) -> Response:
        cancelled, state = await run_in_threadpool(data.cancel, request.path_params["run_id"])
        return json_response({"cancelled": cancelled, "state": state})

    @answering
    async def rerun(request: Request) -> Response:
        return json_response({"rerun_id": await run_in_threadpool(data.rerun, request.path_params["run_id"])})

    @answering
    async def dead_letters(request: Request) -> Response:
        query = request.query_params
        letters = await run_in_threadpool(
            lambda: data.dead_letters(
                queue=query.get("queue") or None,
                reason=query.get("reason") or None,
                run_id=query.get("run") or None,
                limit=integer(request, "limit", 200, highest=MAX_DEAD_LETTERS),
            )
        )
        return json_response({"dead_letters": letters})

    @answering
    async def dead_letter(request: Request) -> Response:
        return json_response(await run_in_threadpool(data.dead_letter, request.path_params["letter_id"]))

    @answering
    async def replay(request: Request) -> Response:
        letter_id, outcome = await run_in_threadpool(data.replay, request.path_params["letter_id"])
        return json_response({"id": letter_id, "outcome": outcome})

    @answering
    async def replay_all(request: Request) -> Response:
        given = await body(request)
        queue, reason = given.get("queue") or None, given.get("reason") or None
        outcomes = await run_in_threadpool(lambda: data.replay_all(queue=queue, reason=reason))
        return json_response({"outcomes": outcomes})

    @answering
    async def purge(request: Request) -> Response:
        given = await body(request)
        if given.get("confirm") is not True:
            raise BadRequest('Purging deletes dead letters for good: send {"confirm": true} to confirm.')
        queue = given.get("queue") or None
        return json_response({"purged": await run_in_threadpool(lambda: data.purge(queue=queue))})

    @answering
    async def queues(request: Request) -> Response:
        return json_response(await run_in_threadpool(data.overview))

    return [
        Route("/api/runs", runs),
        Route("/api/runs/{run_id}", run),
        Route("/api/runs/{run_id}/steps/{node}", step),
        Route("/api/runs/{run_id}/cancel", cancel, methods=["POST"]),
        Route("/api/runs/{run_id}/rerun", rerun, methods=["POST"]),
        Route("/api/dead-letters", dead_letters),
        Route("/api/dead-letters/replay", replay_all, methods=["POST"]),
        Route("/api/dead-letters/purge", purge, methods=["POST"]),
        Route("/api/dead-letters/{letter_id}", dead_letter),
        Route("/api/dead-letters/{letter_id}/replay", replay, methods=["POST"]),
        Route("/api/queues", queues),
    ]
