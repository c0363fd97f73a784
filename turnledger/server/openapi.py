"""The OpenAPI document the server serves at ``/openapi.json`` (issue 37 point 3).

Hand-written: the Conversations API's shapes are OpenAI's (linked, not repeated), and
turnledger's own endpoints are described here. ``tests/server/test_openapi.py`` holds it to the
application's routes, both ways.
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

_ID = {"name": "conversation_id", "in": "path", "required": True,
       "schema": {"type": "string", "pattern": "^conv_[0-9a-f]{32}$"}}
_ITEM = {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}
_OPENAI = "https://platform.openai.com/docs/api-reference/conversations"
_ERROR = {"description": "OpenAI's error envelope: {error: {message, type, param, code}}",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _op(summary: str, *, params: tuple[dict[str, Any], ...] = (_ID,),
        body: dict[str, Any] | None = None, answer: str = "application/json",
        ) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": list(params),
        "responses": {"200": {"description": "OK", "content": {answer: {}}},
                      "400": _ERROR, "401": _ERROR, "404": _ERROR, "413": _ERROR},
    }
    if body is not None:
        op["requestBody"] = {"content": {"application/json": {"schema": body}}}
    return op


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


_ONE = "/v1/conversations/{conversation_id}"
_ITEMS = {"type": "array", "maxItems": 20,
          "items": {"type": "object", "description": "a Responses input item"}}
_AUDIT = ("; without keys, also a session of the store no conversation names (written by the "
          "library, an integration or an import), as the dashboard shows it")


def openapi_document() -> dict[str, Any]:
    """The document (module doc)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "turnledger server", "version": "1",
                 "description": "OpenAI's Conversations API (" + _OPENAI + ") on a turnledger "
                 "store: each conversation a session, each item an append; and what only "
                 "turnledger answers on the same conversations."},
        "components": {"schemas": {"Error": _object(error=_object(
            message={"type": "string"}, type={"type": "string"},
            param={"type": ["string", "null"]}, code={"type": ["string", "null"]}))},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {**_conversations_api(), **_turnledgers_own(), **_pages()},
    }


def _conversations_api() -> dict[str, Any]:
    """OpenAI's Conversations API routes."""
    metadata = {"type": "object", "maxProperties": 16,
                "additionalProperties": {"type": "string", "maxLength": 512}}
    return {
        "/v1/conversations": {"post": _op(
            "Create a conversation (a session) holding the given items in one transaction",
            params=(), body=_object(items=_ITEMS, metadata=metadata))},
        _ONE: {
            "get": _op("Retrieve a conversation"),
            "post": _op("Update a conversation's metadata", body=_object(metadata=metadata)),
            "delete": _op("Delete a conversation: hidden and its views cleared (recorded); "
                          "on an encrypted store its content erased (Store.forget)"),
        },
        _ONE + "/items": {
            "post": _op("Add up to 20 items, one append each, in one transaction",
                        body=_object(items=_ITEMS)),
            "get": _op("List items (limit 1-100, order asc|desc, after an item id); an item "
                       "recorded without this API has an id made of its log position",
                       params=(_ID, *(
                           {"name": n, "in": "query", "required": False,
                            "schema": {"type": "string"}}
                           for n in ("limit", "order", "after", "include")))),
        },
        _ONE + "/items/{item_id}": {
            "get": _op("Retrieve an item", params=(_ID, _ITEM)),
            "delete": _op("Delete the newest item (recorded as MessagePopped); an older "
                          "one, or one recorded as one message with others, is refused with "
                          "400: the log is append-only", params=(_ID, _ITEM)),
        },
    }


def _turnledgers_own() -> dict[str, Any]:
    """What only turnledger answers on the same conversations."""
    return {
        _ONE + "/window": {"post": _op(
            "The window for the next model call (Session.prepare_request): the capacity "
            "verdict (estimated_tokens, model_context_window, budget, window), the "
            "request body for the API (an Anthropic body with cache breakpoints), the "
            "session's prompt_cache_key, the request_digest a usage names, the "
            "HistoryTrimmed it recorded; with include, the "
            "kept items in Responses form (items) and every event it recorded (events). "
            "items: new items recorded first in the same write (added_items), as "
            "items.create would. 400 context_length_exceeded or unanswered_tool_calls "
            "when refused (R18)",
            body=_object(tools={"type": "array"}, items=_ITEMS, api={
                "enum": ["openai_responses", "openai_chat", "anthropic"]}, include={
                "type": "array", "items": {"enum": ["items", "events"]}}))},
        _ONE + "/overflow": {"post": _op(
            "Overflow recovery from the provider's error text (R25, R26)",
            body=_object(error={"type": "string"}))},
        _ONE + "/usage": {"post": _op(
            "Record what the provider billed for a window (Session.record_usage, issue "
            "35): usage is the provider's usage object (OpenAI Chat, Responses, Anthropic "
            "or Gemini), request_digest the window answer's (default: the newest window); "
            "answers the UsageRecorded event. 400 naming usage or request_digest when "
            "refused; nothing is recorded then",
            body=_object(usage={"type": "object"}, request_digest={"type": "string"}))},
        _ONE + "/timeline": {"get": _op("One line per recorded event (E6)" + _AUDIT)},
        _ONE + "/verify": {"get": _op("Audit the conversation's log: chain and rules" + _AUDIT)},
        _ONE + "/what-if": {"post": _op(
            "Re-decide the conversation under another profile, in memory" + _AUDIT,
            body=_object(profile={"type": "object"}))},
        _ONE + "/report": {"get": _op("The HTML report of the conversation" + _AUDIT,
                                      answer="text/html")},
    }


def _pages() -> dict[str, Any]:
    return {
        "/openapi.json": {"get": _op("This document", params=())},
        "/": {"get": _op(
            "The live dashboard: one self-contained page that follows GET /v1/events and "
            "draws each session's context gauge, trims, summaries, clearings, cache breaks "
            "and cache hit rate as they happen, with a link to its report; served without "
            "a key (it holds no data), the stream it reads needs one when keys are required",
            params=(), answer="text/html")},
    }
