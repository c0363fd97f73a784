"""Access to the server: bearer API keys and the request size limit (issue 37 point 5).

A pure ASGI middleware (not Starlette's ``BaseHTTPMiddleware``, which buffers responses and
would hold the SSE stream back), so it wraps every route, the stream's included:

- with keys required, ``Authorization: Bearer <secret>`` must name a live key
  (`Registry.key_for`, by the secret's SHA-256), else 401 in OpenAI's envelope; the key's
  tenant is the request's (``scope["state"]["tenant"]``, `tenant_of`), and a conversation is
  seen only by the tenant that created it. Without keys (a loopback server with none made)
  every request is the tenant ``""``.
- a body over ``max_body_bytes`` is refused with 413, by its ``Content-Length`` before it is
  read, or once the bytes received pass the limit.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnledger.server.registry import Registry

__all__ = ["Access", "tenant_of"]

# The dashboard page holds no data (it reads the stream, which needs a key): a browser's
# navigation cannot send one.
_OPEN_PATHS = frozenset({"/openapi.json", "/"})


def tenant_of(request: Request) -> str:
    """The tenant the request acts for (``""`` when keys are not required)."""
    return str(request.scope.get("state", {}).get("tenant", ""))


class _TooLarge(Exception):
    pass


async def _error(send: Send, status: int, message: str, code: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": code}}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Access:
    """The middleware of the module doc."""

    def __init__(self, app: ASGIApp, *, registry: Registry, require_keys: bool,
                 max_body_bytes: int) -> None:
        self.app = app
        self.registry = registry
        self.require_keys = require_keys
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.concurrency import run_in_threadpool

        state: dict[str, Any] = scope.setdefault("state", {})
        if self.require_keys and scope["path"] not in _OPEN_PATHS:
            secret = _bearer(scope)
            key = None if secret is None else await run_in_threadpool(
                self.registry.key_for, secret)
            if key is None:
                await _error(send, 401, "Incorrect API key provided." if secret else
                             "Missing bearer authentication in header", "invalid_api_key")
                return
            state["tenant"] = key.tenant
        else:
            state["tenant"] = ""
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            await _error(send, 413, f"The request body is over {self.max_body_bytes} bytes",
                         "request_too_large")
            return
        received = 0
        started = False

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except _TooLarge:
            if started:
                raise
            await _error(send, 413, f"The request body is over {self.max_body_bytes} bytes",
                         "request_too_large")


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text: str = bytes(value).decode("latin-1")
            scheme, _, secret = text.partition(" ")
            if scheme.lower() == "bearer" and secret.strip():
                return secret.strip()
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
