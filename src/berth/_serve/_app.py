"""The inbox's ASGI app: the route table, the error handlers, the middleware (Starlette).

The handlers are plain functions of the request (`_pages`: the page, its forms, login;
`_api`: the JSON API, /health, /metrics) over one `InboxState` held in `app.state`
(`berth._serve._state`). Every store call is blocking and runs in Starlette's thread pool.
Every response carries security headers: a Content-Security-Policy that allows only this
origin's own scripts and styles (no inline code anywhere), no framing, no referrer, no
sniffing; nothing but the static files is stored by a cache (`Cache-Control: no-store`:
pages, the API and /metrics carry prompts).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import berth
from berth._serve import _api as api
from berth._serve import _pages as pages
from berth._serve._auth import Auth
from berth._serve._inbox import Inbox
from berth._serve._state import HERE, HttpError, InboxState, LogIn, log, plain, render, state

__all__ = ["ROUTES", "create_app"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
_REPLACED = frozenset(name for name, _ in SECURITY_HEADERS)  # a handler's own values of these give way
_NOT_CACHED = _REPLACED | {b"cache-control"}
MAX_BODY = 1 << 20  # an answer of MAX_ANSWER_CHARS, form-encoded or JSON-escaped, fits
MAX_SMALL_BODY = 16 << 10  # the login and logout forms
SMALL_BODIES = ("/login", "/logout")

ROUTES: list[BaseRoute] = [
    Route("/", pages.index),
    Route("/inbox/live", pages.fragment),
    Route("/answer", pages.answer_form, methods=["POST"]),
    Route("/answer", pages.answer_get),
    Route("/login", pages.login_page),
    Route("/login", pages.login, methods=["POST"]),
    Route("/logout", pages.logout, methods=["POST"]),
    Route("/api/questions", api.api_questions),
    Route("/api/answers", api.api_answer, methods=["POST"]),
    Route("/api/runs", api.api_runs),
    Route("/api/openapi.json", api.openapi),
    Route("/health", api.health),
    Route("/metrics", api.metrics),
    Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
]
"""Every address the inbox answers, and its handler."""


def create_app(
    inbox: Inbox,
    auth: Auth,
    *,
    poll_seconds: float = 3.0,
    secure_cookies: bool | None = None,
    notify: berth.Webhook | None = None,
    notify_every: float = 5.0,
) -> Starlette:
    """The inbox app for `inbox`, guarded by `auth`.

    Args:
        inbox: the identities and stores served.
        auth: tokens, trusted header and sessions.
        poll_seconds: how often an open page asks for changes.
        secure_cookies: mark cookies Secure; None marks them when the request came over https.
        notify: while the app runs, announces new questions and near deadlines every `notify_every`
            seconds (`Webhook.watch`); closed with the app; its figures are on /metrics.
        notify_every: seconds between those looks.
    """
    app = Starlette(routes=ROUTES, exception_handlers=_ERRORS, lifespan=_lifespan)
    app.state.inbox_state = InboxState(
        inbox, auth, poll_seconds=poll_seconds, secure_cookies=secure_cookies, notify=notify, notify_every=notify_every
    )
    app.add_middleware(_BodyLimit)
    app.add_middleware(_SecurityHeaders)
    app.add_middleware(_Forwarded, auth=auth)
    return app


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    st: InboxState = app.state.inbox_state
    stop_watching = None
    if st.notify is not None:
        stop_watching = st.notify.watch([s.questions for s in st.inbox.sources.values()], every=st.notify_every)
    try:
        yield
    finally:
        if st.notify is not None and stop_watching is not None:
            await run_in_threadpool(stop_watching)
            await run_in_threadpool(st.notify.close)  # drains the queue for up to its close_timeout, once
        await run_in_threadpool(st.inbox.close)


# --- errors ----------------------------------------------------------------------------------


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/metrics"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    if _is_api(request):
        headers = {"www-authenticate": 'Bearer realm="berth"'} if exc.status == 401 else {}
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers={**headers, **exc.headers})
    response = _error_page(request, exc.status, str(exc))
    response.headers.update(exc.headers)
    return response


async def _must_log_in(request: Request, exc: Exception) -> Response:
    if request.url.path == "/inbox/live":  # the page's script reloads, which leads to the login
        return plain(401, "log in again")
    if state(request).auth.login_form:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method != "GET":  # a form sent after the session ended: back to the inbox, saying so
            target = "/?lost=1"
        return RedirectResponse("/login" + (f"?{urlencode({'next': target})}" if target != "/" else ""), 303)
    return plain(401, "sign in through the proxy in front of this inbox")


async def _store_error(request: Request, exc: Exception) -> Response:
    log.error("berth serve: %s", exc)
    return await _http_error(request, HttpError(503, "the store is not available right now; try again"))


async def _not_found(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if _is_api(request):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    return _error_page(request, exc.status_code, f"{exc.detail}: there is no page at this address.")


def _error_page(request: Request, status: int, message: str) -> Response:
    """An error a person meets on the page: what happened, and the way back to the inbox."""
    return render(state(request), "error.html", status=status, code=status, message=message)


_ERRORS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HttpError: _http_error,
    LogIn: _must_log_in,
    berth.BackendError: _store_error,
    HTTPException: _not_found,
}


# --- middleware ------------------------------------------------------------------------------


class _SecurityHeaders:
    """ASGI middleware adding the security headers to every HTTP response."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        cached = scope["path"].startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                replaced = _REPLACED if cached else _NOT_CACHED
                headers = [h for h in message.get("headers", []) if h[0] not in replaced]
                if not cached:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _BodyLimit:
    """ASGI middleware that stops reading a request body past its bound: before reading it, by Content-Length.

    The 413 is raised from `receive` inside the handler that reads the body, so it is answered like
    every other error; nothing past the bound is ever read, let alone parsed.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = MAX_SMALL_BODY if scope["path"] in SMALL_BODIES else MAX_BODY
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"0")
        too_large = HttpError(413, f"the request body is larger than {limit} bytes")
        stated = int(declared) if declared.isdigit() else 0  # the server refuses a malformed one
        read = 0

        async def bounded() -> Message:
            nonlocal read
            if stated > limit:
                raise too_large
            message = await receive()
            read += len(message.get("body", b""))
            if read > limit:
                raise too_large
            return message

        await self.app(scope, bounded, send)


class _Forwarded:
    """ASGI middleware: who a request came through. Keeps the connection's own peer as `scope["berth.peer"]`
    and, only when that peer is a proxy named by `--forwarded-allow-ips`, takes the client's address
    from X-Forwarded-For (the nearest hop that is not such a proxy) and the scheme from X-Forwarded-Proto.
    """

    def __init__(self, app: ASGIApp, auth: Auth):
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = scope["client"][0] if scope.get("client") else None
        scope = {**scope, "berth.peer": peer}
        if self.auth.trusts(peer):
            headers = {k.decode(): v.decode("latin-1") for k, v in scope["headers"] if k.startswith(b"x-forwarded-")}
            proto = headers.get("x-forwarded-proto", "").strip().lower()
            if proto in ("http", "https"):
                scope["scheme"] = proto
            hops = [h.strip() for h in headers.get("x-forwarded-for", "").split(",") if h.strip()]
            while len(hops) > 1 and self.auth.trusts(hops[-1]):
                hops.pop()
            if hops:
                scope["client"] = (hops[-1], 0)
        await self.app(scope, receive, send)
