"""The ASGI application: OpenAI's Conversations API on a turnledger store (issue 37, ADR-0103).

`create_app(store, settings)` builds a Starlette application; ``turnledger serve`` runs it
under uvicorn. Every store call is blocking and runs in a worker thread
(`starlette.concurrency.run_in_threadpool`), never on the event loop. Errors use OpenAI's
envelope, ``{"error": {"message", "type", "param", "code"}}``. Access (`access.py`) wraps
every route, the SSE stream's included.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

import turnledger as tl
from turnledger.server.access import Access, tenant_of
from turnledger.server.conversations import Conversations, NotFound, Refused
from turnledger.server.dashboard import dashboard
from turnledger.server.openapi import openapi_document
from turnledger.server.registry import ConversationRecord, Registry
from turnledger.server.stream import EventHub, Visibility, stream_routes

__all__ = ["Settings", "create_app"]

log = logging.getLogger("turnledger.server")
T = TypeVar("T")

MAX_ITEMS_PER_REQUEST = 20
"""OpenAI's limit on items per ``items.create`` (the Agents SDK sends at most 20 at a time)."""
_LIST_LIMIT = (1, 100)


@dataclass(frozen=True)
class Settings:
    """How a server runs: its store URL (where its own tables live, `Registry`), whether keys
    are required, the body limit, the CORS origins (none: no CORS headers at all), the
    profile every new conversation starts with."""

    store_url: str = "memory://server"
    require_keys: bool = False
    max_body_bytes: int = 1 << 20
    cors_origins: tuple[str, ...] = ()
    profile: tl.RuntimeProfile | None = None
    providers: tuple[tl.ProviderProfile, ...] = ()
    registry: Registry | None = field(default=None, compare=False)


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False,
                            separators=(",", ":"))

_ORJSON_FLOAT = re.compile(rb"\.0000"), re.compile(rb"e-[5-9][^0-9]")
"""Where orjson's text of a number may not be Python's: a float from 1e-9 to 1e-4 (orjson
writes ``0.00001`` and ``1e-9`` where Python writes ``1e-05`` and ``1e-09``); no other finite
float differs (tests/server/test_encoding.py). A string holding either is a false alarm,
answered by the standard library."""


def _orjson_dumps() -> Callable[[Any], bytes] | None:
    try:  # the server extra brings it (ADR-0110); without it, the standard library writes all
        from orjson import dumps
    except ImportError:  # pragma: no cover - an install without the extra's orjson
        return None
    return dumps


_ORJSON_DUMPS = _orjson_dumps()


def _fast_dumps(content: Any) -> bytes | None:
    """``content`` as orjson writes it, or None where that is not the standard library's text
    byte for byte (orjson refuses what it would write otherwise: a key that is not a string,
    an integer beyond 64 bits, a lone surrogate), or without orjson."""
    if _ORJSON_DUMPS is None:
        return None
    try:
        out = _ORJSON_DUMPS(content)
    except TypeError:  # orjson.JSONEncodeError
        return None
    return None if any(p.search(out) for p in _ORJSON_FLOAT) else out


class _Json(JSONResponse):
    """Starlette's JSON answer, the same bytes, encoded without the check for cycles: an
    answer is made of fresh JSON values and holds none, and the check was a sixth of
    encoding a window's answer (benchmarks/server.py)."""

    def render(self, content: Any) -> bytes:
        return _ENCODER.encode(content).encode("utf-8")


class _RecordJson(_Json):
    """An answer of recorded items or a window, the same bytes written by orjson, ten times
    faster (a 100-turn window: 0.16 ms to 0.04 ms with the check; ADR-0110). Only where every
    float is finite: orjson writes NaN and the infinities as ``null`` where Python refuses
    them, and an item holding one is refused before it is recorded (``check_finite_json``);
    a window's own numbers are counts and a correction from 1 to 2."""

    def render(self, content: Any) -> bytes:
        fast = _fast_dumps(content)
        return super().render(content) if fast is None else fast


def error_response(status: int, message: str, *, kind: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None) -> JSONResponse:
    """OpenAI's error envelope."""
    return _Json({"error": {"message": message, "type": kind, "param": param,
                                   "code": code}}, status_code=status)


def _conversation(record: ConversationRecord) -> dict[str, Any]:
    return {"id": record.id, "object": "conversation", "created_at": record.created_at,
            "metadata": record.metadata}


def _metadata(body: dict[str, Any], param: str = "metadata") -> dict[str, str]:
    value = body.get(param)
    if value is None:
        return {}
    if (not isinstance(value, dict) or len(value) > 16
            or not all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str)
                       and len(v) <= 512 for k, v in value.items())):
        raise Refused("metadata must be an object of at most 16 string keys (64 characters "
                      "at most) and string values (512 characters at most)", param,
                      "invalid_value")
    return value


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise Refused("The request body is not valid JSON.", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise Refused("The request body must be a JSON object.", None, "invalid_value")
    return body


def _items_param(body: dict[str, Any], required: bool) -> list[Any]:
    items = body.get("items")
    if items is None and not required:
        return []
    if not isinstance(items, list):
        raise Refused("'items' must be an array of items", "items", "invalid_value")
    if len(items) > MAX_ITEMS_PER_REQUEST:
        raise Refused(f"At most {MAX_ITEMS_PER_REQUEST} items can be added at a time, got "
                      f"{len(items)}", "items", "array_above_max_length")
    return items


class _Api:
    """The route handlers over one `Conversations` (each store call in a worker thread)."""

    def __init__(self, conversations: Conversations) -> None:
        self.c = conversations

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_in_threadpool(fn, *args)

    async def create(self, request: Request) -> Response:
        body = await _body(request)
        items = _items_param(body, required=False)
        record = await self._call(self.c.create, tenant_of(request), items, _metadata(body))
        return _Json(_conversation(record))

    async def retrieve(self, request: Request) -> Response:
        record = await self._call(self.c.record, request.path_params["conversation_id"],
                                  tenant_of(request))
        return _Json(_conversation(record))

    async def update(self, request: Request) -> Response:
        body = await _body(request)
        if "metadata" not in body:
            raise Refused("Missing required parameter: 'metadata'.", "metadata",
                          "missing_required_parameter")
        record = await self._call(self.c.update, request.path_params["conversation_id"],
                                  tenant_of(request), _metadata(body))
        return _Json(_conversation(record))

    async def delete(self, request: Request) -> Response:
        conversation = request.path_params["conversation_id"]
        await self._call(self.c.delete, conversation, tenant_of(request))
        return _Json({"id": conversation, "object": "conversation.deleted",
                             "deleted": True})

    async def add_items(self, request: Request) -> Response:
        body = await _body(request)
        items = _items_param(body, required=True)
        stored = await self._call(self.c.add_items, request.path_params["conversation_id"],
                                  tenant_of(request), items)
        return _RecordJson(_page(stored, has_more=False))

    async def list_items(self, request: Request) -> Response:
        conversation = request.path_params["conversation_id"]
        query = request.query_params
        limit = _limit(query.get("limit"))
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise Refused("order must be 'asc' or 'desc'", "order", "invalid_value")
        await self._call(self.c.record, conversation, tenant_of(request))
        items = [s.item for s in await self._call(self.c.items, conversation)]
        if order == "desc":
            items.reverse()
        after = query.get("after")
        if after is not None:
            ids = [i.get("id") for i in items]
            if after not in ids:
                raise Refused(f"No item with id '{after}' in this conversation", "after",
                              "invalid_value")
            items = items[ids.index(after) + 1:]
        return _RecordJson(_page(items[:limit], has_more=len(items) > limit))

    async def retrieve_item(self, request: Request) -> Response:
        item = await self._call(self.c.item, request.path_params["conversation_id"],
                                tenant_of(request), request.path_params["item_id"])
        return _RecordJson(item)

    async def delete_item(self, request: Request) -> Response:
        conversation = request.path_params["conversation_id"]
        owner = tenant_of(request)
        await self._call(self.c.delete_item, conversation, owner,
                         request.path_params["item_id"])
        return _Json(_conversation(await self._call(self.c.record, conversation, owner)))

    async def window(self, request: Request) -> Response:
        body = await _body(request)
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise Refused("tools must be an array", "tools", "invalid_value")
        include = body.get("include") or []
        if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
            raise Refused("include must be an array of strings", "include", "invalid_value")
        items = _items_param(body, required=False) if "items" in body else None
        answer = await self._call(self.c.window, request.path_params["conversation_id"],
                                  tenant_of(request), tools,
                                  body.get("api", "openai_responses"), frozenset(include),
                                  items)
        return _RecordJson(answer)

    async def overflow(self, request: Request) -> Response:
        body = await _body(request)
        error = body.get("error")
        if not isinstance(error, str) or not error:
            raise Refused("'error' must be the provider's error text", "error",
                          "missing_required_parameter")
        answer = await self._call(self.c.recover, request.path_params["conversation_id"],
                                  tenant_of(request), error)
        return _Json(answer)

    async def usage(self, request: Request) -> Response:
        body = await _body(request)
        usage = body.get("usage")
        if not isinstance(usage, dict):
            raise Refused("'usage' must be the provider's usage object (OpenAI Chat, Responses, "
                          "Anthropic or Gemini)", "usage", "missing_required_parameter")
        digest = body.get("request_digest")
        if digest is not None and not isinstance(digest, str):
            raise Refused("'request_digest' must be the window answer's request_digest",
                          "request_digest", "invalid_value")
        answer = await self._call(self.c.usage, request.path_params["conversation_id"],
                                  tenant_of(request), usage, digest)
        return _Json(answer)

    async def timeline(self, request: Request) -> Response:
        from turnledger.audit import timeline

        events = await self._call(self.c.events, request.path_params["conversation_id"],
                                  tenant_of(request))
        entries = [{"position": e.position, "timestamp": e.to_jsonable()["timestamp"],
                    "type": e.type, "summary": e.summary} for e in timeline(events)]
        return _Json({"object": "list", "data": entries})

    async def verify(self, request: Request) -> Response:
        from turnledger.audit import verify

        session = await self._call(self.c.audited, request.path_params["conversation_id"],
                                   tenant_of(request))
        report = await self._call(verify, self.c.store.backend, [session])
        return _Json({"object": "conversation.verification", "ok": report.ok,
                             "events_checked": report.events_checked,
                             "findings": [str(v) for v in report.violations],
                             "notes": [str(n) for n in report.notes]})

    async def what_if(self, request: Request) -> Response:
        from turnledger.audit import what_if

        body = await _body(request)
        profile = _profile(body.get("profile"))
        events = await self._call(self.c.events, request.path_params["conversation_id"],
                                  tenant_of(request))
        report = await self._call(lambda: what_if(events, profile))
        return _Json({"object": "conversation.what_if", "report": str(report)})

    async def report(self, request: Request) -> Response:
        from turnledger.audit import report

        events = await self._call(self.c.events, request.path_params["conversation_id"],
                                  tenant_of(request))
        return HTMLResponse(await self._call(report, events))


def _profile(value: object) -> tl.RuntimeProfile:
    if not isinstance(value, dict):
        raise Refused("'profile' must be an object of RuntimeProfile fields", "profile",
                      "invalid_value")
    try:
        return tl.RuntimeProfile(**value)
    except (TypeError, ValueError) as error:
        raise Refused(f"profile: {error}", "profile", "invalid_value") from None


def _limit(value: str | None) -> int:
    if value is None:
        return 20
    low, high = _LIST_LIMIT
    if not value.isdigit() or not low <= int(value) <= high:
        raise Refused(f"limit must be an integer from {low} to {high}", "limit",
                      "invalid_value")
    return int(value)


def _page(items: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": items,
            "first_id": items[0].get("id") if items else None,
            "last_id": items[-1].get("id") if items else None, "has_more": has_more}


async def _refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, Refused)
    return error_response(400, str(error), param=error.param, code=error.code)


async def _not_found(request: Request, error: Exception) -> Response:
    return error_response(404, str(error), code="not_found")


async def _store_error(request: Request, error: Exception) -> Response:
    # The error's text names sessions and positions, never content (nothing of a message
    # reaches the logs: issue 37 point 5).
    log.warning("%s %s: %s", request.method, request.url.path, type(error).__name__)
    if isinstance(error, tl.errors.StoreUnavailable | tl.errors.AppendInDoubt
                  | tl.errors.AppendRefused | tl.ConcurrencyConflict):
        return error_response(503, f"The store did not complete the request "
                              f"({type(error).__name__}); retry", kind="server_error",
                              code="store_unavailable")
    if isinstance(error, tl.SessionNotFound | tl.errors.SessionForgottenError):
        return error_response(404, "Conversation not found.", code="not_found")
    return error_response(400, str(error), code=type(error).__name__)


def routes(api: _Api) -> list[BaseRoute]:
    """The Conversations API, turnledger's own endpoints and the live dashboard (`openapi.py`
    documents each)."""
    one = "/v1/conversations/{conversation_id}"
    return [
        Route("/v1/conversations", api.create, methods=["POST"]),
        Route(one, api.retrieve, methods=["GET"]),
        Route(one, api.update, methods=["POST"]),
        Route(one, api.delete, methods=["DELETE"]),
        Route(one + "/items", api.add_items, methods=["POST"]),
        Route(one + "/items", api.list_items, methods=["GET"]),
        Route(one + "/items/{item_id}", api.retrieve_item, methods=["GET"]),
        Route(one + "/items/{item_id}", api.delete_item, methods=["DELETE"]),
        Route(one + "/window", api.window, methods=["POST"]),
        Route(one + "/overflow", api.overflow, methods=["POST"]),
        Route(one + "/usage", api.usage, methods=["POST"]),
        Route(one + "/timeline", api.timeline, methods=["GET"]),
        Route(one + "/verify", api.verify, methods=["GET"]),
        Route(one + "/what-if", api.what_if, methods=["POST"]),
        Route(one + "/report", api.report, methods=["GET"]),
        Route("/", dashboard, methods=["GET"]),
    ]


def _visibility(registry: Registry) -> Visibility:
    """The streams' scoping (issue 37 point 5): a request sees the conversations its tenant
    owns, as the items API does. Ownership is fixed when a conversation is created, so each
    stream asks the registry once per conversation it meets."""

    async def visible_to(request: Request) -> Callable[[str], bool]:
        tenant = tenant_of(request)
        known: dict[str, bool] = {}

        def visible(conversation_id: str) -> bool:
            if conversation_id not in known:
                found = registry.conversation(conversation_id)
                known[conversation_id] = (found is not None and not found.deleted
                                          and found.owner == tenant)
            return known[conversation_id]

        return visible

    return visible_to


def create_app(store: tl.Store, settings: Settings | None = None) -> Starlette:
    """The server's ASGI application on ``store`` (module doc)."""
    settings = settings or Settings()
    registry = settings.registry or Registry.beside(store)
    conversations = Conversations(store, registry, settings.profile, settings.providers,
                                  audit_any_session=not settings.require_keys)
    api = _Api(conversations)
    hub = EventHub(store)
    stream = stream_routes(store, hub=hub, visibility=(
        _visibility(registry) if settings.require_keys else None))
    all_routes = routes(api) + stream

    async def openapi(request: Request) -> Response:
        return _Json(openapi_document())

    all_routes.append(Route("/openapi.json", openapi, methods=["GET"]))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await hub.close()  # already closed when `serve` began shutting down (handle_exit)
            if settings.registry is None:
                registry.close()

    middleware = [Middleware(Access, registry=registry, require_keys=settings.require_keys,
                             max_body_bytes=settings.max_body_bytes)]
    if settings.cors_origins:
        middleware.insert(0, Middleware(CORSMiddleware, allow_origins=list(
            settings.cors_origins), allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["authorization", "content-type", "last-event-id"]))
    app = Starlette(routes=all_routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={Refused: _refused, NotFound: _not_found,
                                        tl.TurnledgerError: _store_error})
    app.state.conversations = conversations
    app.state.event_hub = hub
    return app
