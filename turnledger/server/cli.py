"""``turnledger serve`` and ``turnledger keys``: the server's commands (issue 37).

`add_server_commands` adds their parsers with argparse alone; Starlette and uvicorn are
imported when ``serve`` runs, so ``import turnledger.cli`` loads neither.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import json
from typing import Any, TextIO

__all__ = ["add_server_commands"]

EXIT_OK, EXIT_USAGE = 0, 2


def add_server_commands(sub: Any) -> None:
    """The ``serve`` and ``keys`` subcommands of ``turnledger``."""
    p = sub.add_parser(
        "serve", help="serve the OpenAI Conversations API on the store (needs [server])",
        description="Serve OpenAI's Conversations API (/v1/conversations ...) on the store, "
        "each conversation a session and each item an append, with turnledger's own "
        "endpoints (window, overflow, timeline, verify, what-if, report; /openapi.json). "
        "Bound to 127.0.0.1 by default. When the store has API keys (turnledger keys "
        "create), every request needs one (Authorization: Bearer ...); a server bound beyond "
        "loopback without keys refuses to start. SIGTERM or Ctrl-C drains the requests in "
        "flight, then exits; each write is one transaction, so a cut request stores nothing.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20,
                   help="largest request body accepted, else 413 (default 1 MiB)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser requests from ORIGIN (repeatable; default: no CORS)")
    p.add_argument("--profile", help="TOML profile every new conversation starts with")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("keys", help="create, revoke and list the server's API keys",
                       description="The server's bearer API keys, kept beside the store "
                       "(postgresql: a table in its schema; sqlite: the file PATH.server) as "
                       "SHA-256 hashes. A key sees the conversations its tenant created; the "
                       "tenant defaults to the key's own id.")
    ksub = p.add_subparsers(dest="keys_command", metavar="ACTION")
    ksub.required = True
    create = ksub.add_parser("create", help="make a key and print its secret (shown once)",
                             description="Make an API key and print its id, tenant and secret; "
                             "the secret is shown this once (only its SHA-256 hash is kept).")
    create.add_argument("--name", default="", help="a label for the key")
    create.add_argument("--tenant", help="share conversations with the keys of this tenant")
    create.add_argument("--json", action="store_true", help="machine-readable output")
    revoke = ksub.add_parser("revoke", help="revoke a key by its id",
                             description="Revoke a key: requests bearing it are refused (401) "
                             "from now on; its conversations stay.")
    revoke.add_argument("key_id", help="the key's id (key_..., from `turnledger keys list`)")
    listing = ksub.add_parser("list", help="list the keys (never their secrets)",
                              description="List the keys: id, live or revoked, tenant, name; "
                              "never a secret.")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_keys)


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds to loopback only (``localhost`` counts)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_keys(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.cli import _open
    from turnledger.server.registry import Registry

    store = _open(args)  # the store first: a new SQLite store's directory and file
    try:
        registry = Registry.beside(store)
    finally:
        store.close()
    try:
        if args.keys_command == "create":
            key, secret = registry.create_key(args.name, args.tenant)
            if args.json:
                print(json.dumps({"id": key.id, "tenant": key.tenant, "secret": secret}),
                      file=out)
            else:
                print(f"{key.id}  tenant {key.tenant}\n{secret}\n(the secret is shown once)",
                      file=out)
            return EXIT_OK
        if args.keys_command == "revoke":
            if not registry.revoke_key(args.key_id):
                print(f"turnledger: error: no live key {args.key_id!r}", file=out)
                return EXIT_USAGE
            print(f"revoked {args.key_id}", file=out)
            return EXIT_OK
        keys = registry.api_keys()
        if args.json:
            print(json.dumps([dataclasses.asdict(k) for k in keys]), file=out)
        for key in [] if args.json else keys:
            state = "revoked" if key.revoked else "live"
            print(f"{key.id}  {state:7}  tenant {key.tenant}  {key.name}", file=out)
        return EXIT_OK
    finally:
        registry.close()


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    import sys

    try:
        import uvicorn
    except ImportError:
        print("turnledger: error: serve needs the server extra: pip install "
              "'turnledger[server]'", file=sys.stderr)
        return EXIT_USAGE
    from turnledger.cli import _open
    from turnledger.server.app import Settings, create_app
    from turnledger.server.registry import Registry

    profile: Any = None
    providers: tuple[Any, ...] = ()
    if args.profile:
        import turnledger as tl

        profile, loaded = tl.load_profile(args.profile)
        providers = tuple(loaded)
    store = _open(args)
    try:
        registry = Registry.beside(store)
        keyed = registry.has_live_keys()
        registry.close()
        if not keyed and not is_loopback(args.host):
            print(f"turnledger: error: refusing to serve on {args.host} without API keys: "
                  "make one with 'turnledger keys create', or bind to 127.0.0.1",
                  file=sys.stderr)
            return EXIT_USAGE
        settings = Settings(store_url=args.store, require_keys=keyed,
                            max_body_bytes=args.max_body_bytes,
                            cors_origins=tuple(args.cors_origin), profile=profile,
                            providers=providers)
        # uvicorn handles SIGTERM and SIGINT: it stops accepting, lets the requests in flight
        # finish (their store writes are one transaction each), runs the lifespan's shutdown.
        app = create_app(store, settings)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info",
                                access_log=False)
        _server_class()(app, config).run()
    finally:
        store.close()
    return EXIT_OK


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which also ends the event streams when shutdown begins: uvicorn
        waits for every open response before the lifespan's shutdown runs, and a stream never
        ends on its own (SIGTERM would wait forever). Each stream gets its ``shutdown`` frame
        and resumes elsewhere with its last id."""

        def __init__(self, app: Any, config: Any) -> None:
            super().__init__(config)
            self.hub = app.state.event_hub

        def handle_exit(self, sig: int, frame: Any) -> None:
            with contextlib.suppress(RuntimeError):  # no loop running: nothing streams
                asyncio.get_running_loop().create_task(self.hub.close())
            super().handle_exit(sig, frame)

    return Server
