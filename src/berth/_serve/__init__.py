"""`berth serve`: the inbox, a web page and JSON API where people answer what parked runs wait on.

Pieces: `_inbox` (what is shown and answered, over the stores; no HTTP),
`_auth` (tokens, sessions, trusted header, CSRF), `_app` (the Starlette app: its
route table, error handlers and middleware), `_state` (`InboxState`, the one state
object every handler reads, and what handlers ask of a request), `_pages` and `_api`
(the handlers: plain functions of the request), `_views` (template filters, JSON
documents, metrics text), `_openapi`, and the package data `templates/` (Jinja2)
and `static/` (one script, one stylesheet; no CDN, no build). Needs the `serve` extra (starlette, uvicorn, jinja2,
python-multipart), imported only when the command runs.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Iterable
from typing import Any

from berth._serve._auth import Auth, AuthError, is_loopback, parse_proxies, parse_tokens
from berth._serve._inbox import Inbox, Source

__all__ = [
    "Auth",
    "AuthError",
    "Inbox",
    "ServeError",
    "Source",
    "build_app",
    "check_port",
    "is_loopback",
    "parse_proxies",
    "parse_tokens",
    "run",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470


def build_app(
    sources: Iterable[Source], auth: Auth, *, poll_seconds: float = 3.0, max_age: float = 1.0, **options: Any
) -> Any:
    """The inbox's ASGI app over `sources` (one per identity), guarded by `auth`.

    `max_age` is how long, in seconds, one listing of every header serves all requests (0: none).
    """
    from berth._serve._app import create_app

    return create_app(Inbox(sources, max_age=max_age), auth, poll_seconds=poll_seconds, **options)


def check_port(host: str, port: int) -> None:
    """Raise ServeError, naming the reason, when `host:port` cannot be listened on right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def run(
    app: Any,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    log_level: str = "info",
) -> None:
    """Serve `app` with uvicorn until SIGINT/SIGTERM, then finish requests in flight (up to 10 s) and close.

    Forwarded headers are the app's own business (its `Auth` names the proxies it trusts): uvicorn's
    handling of them is off. The audit log (one line per answer, logger `berth.serve.audit`) and failed logins
    go to stderr with uvicorn's access log.
    """
    import uvicorn

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    serve_log = logging.getLogger("berth.serve")
    serve_log.addHandler(handler)
    serve_log.setLevel(logging.INFO)
    serve_log.propagate = False
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 or 3 when it cannot bind or start; it logged why
        if exc.code:
            raise ServeError(f"could not serve on {host}:{port} (see the error above)") from None
        raise


class ServeError(Exception):
    """The server could not start (one line; the reason was logged)."""
