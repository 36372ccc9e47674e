"""The inbox's ASGI app: the page, its forms, the JSON API, /metrics and /health (Starlette).

Every store call is blocking and runs in Starlette's thread pool. Every response
carries security headers: a Content-Security-Policy that allows only this
origin's own scripts and styles (no inline code anywhere), no framing, no
referrer, no sniffing; nothing but the static files is stored by a cache
(`Cache-Control: no-store`: pages, the API and /metrics carry prompts).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import berth
from berth._serve import _views as views
from berth._serve._auth import (
    CSRF_COOKIE,
    FAILURE_WINDOW,
    FAILURES_ALLOWED,
    SESSION_COOKIE,
    Auth,
    is_loopback,
    new_csrf,
    same_token,
)
from berth._serve._inbox import SORTS, Card, Inbox, Refused, Snapshot
from berth._serve._openapi import OPENAPI

__all__ = ["create_app"]

HERE = Path(__file__).parent
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
MAX_LIMIT_PAGE = 100
MAX_LIMIT_API = 1000
MAX_ANSWER_CHARS = 65536
MAX_BODY = 1 << 20  # an answer of MAX_ANSWER_CHARS, form-encoded or JSON-escaped, fits
MAX_SMALL_BODY = 16 << 10  # the login and logout forms
SMALL_BODIES = ("/login", "/logout")
MAX_EDITED_ARGUMENTS = 1000
LOST = "Your session ended before your answer arrived, so nothing was recorded."
STALE = "That page was from an earlier session (you logged in again since), so nothing was recorded."

log = logging.getLogger("berth.serve")


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
        too_large = _Http(413, f"the request body is larger than {limit} bytes")
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


class _LogIn(Exception):
    """The request must log in first (the login page, or 401 where there is none)."""


class _Http(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(views.FILTERS)
    return env


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
    env = _templates()
    notice_key = secrets.token_bytes(32)  # signs the "answered" notice's key: no link can put other text there

    def done_mac(person: str, key: str) -> str:
        return hmac.new(notice_key, f"{person}\0{key}".encode(), hashlib.sha256).hexdigest()[:32]

    # --- who is asking ---------------------------------------------------------------------

    def loopback_host(request: Request) -> bool:
        return is_loopback(request.url.hostname or "")

    def page_person(request: Request) -> tuple[str, str]:
        """(person, the CSRF token its forms carry, or "" before one is set) for a page request.

        Raises _LogIn when the request must log in first.
        """
        person = auth.from_header(request.headers, request.scope.get("berth.peer"))
        session = auth.session(request.cookies.get(SESSION_COOKIE))
        if session is not None:
            return session.person, session.csrf
        if person is not None:
            return person, request.cookies.get(CSRF_COOKIE) or ""
        if not auth.required:
            if not loopback_host(request):
                raise _Http(421, "without authentication the inbox answers only to a loopback host name")
            return auth.local_person, request.cookies.get(CSRF_COOKIE) or ""
        raise _LogIn()

    def client(request: Request) -> str:
        return request.client.host if request.client else "?"

    def token_limit(request: Request) -> None:
        """Refuse (429) a token from a client address that gave too many wrong ones lately."""
        wait = auth.refused_for(client(request))
        if wait:
            seconds = str(math.ceil(wait))
            raise _Http(
                429, f"too many wrong tokens from {client(request)}: try again in {seconds} s", {"retry-after": seconds}
            )

    def token_failed(request: Request, what: str) -> None:
        peer = client(request)
        log.warning("berth serve: %s from %s on %s %s", what, peer, request.method, request.url.path)
        if auth.failed(peer, login=what == "failed login"):
            log.warning(
                "berth serve: %d wrong tokens from %s within %g s: its tokens are refused (429) for as long",
                FAILURES_ALLOWED,
                peer,
                FAILURE_WINDOW,
            )

    def api_person(request: Request) -> str:
        authorization = request.headers.get("authorization")
        person = None
        if auth.presents_token(authorization):
            token_limit(request)
            person = auth.bearer(authorization)
            if person is None:
                token_failed(request, "wrong bearer token")
        person = person or auth.from_header(request.headers, request.scope.get("berth.peer"))
        if person is not None:
            return person
        if not auth.required:
            if not loopback_host(request):
                raise _Http(421, "without authentication the inbox answers only to a loopback host name")
            return auth.local_person
        raise _Http(401, "authentication required: send Authorization: Bearer <BERTH_SERVE_TOKEN>")

    async def must_log_in(request: Request, exc: Exception) -> Response:
        if request.url.path == "/inbox/live":  # the page's script reloads, which leads to the login
            return _plain(401, "log in again")
        if auth.login_form:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            if request.method != "GET":  # a form sent after the session ended: back to the inbox, saying so
                target = "/?lost=1"
            return RedirectResponse("/login" + (f"?{urlencode({'next': target})}" if target != "/" else ""), 303)
        return _plain(401, "sign in through the proxy in front of this inbox")

    def secure(request: Request) -> bool:
        return request.url.scheme == "https" if secure_cookies is None else secure_cookies

    def with_csrf_cookie(request: Request, response: Response, csrf: str) -> Response:
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=secure(request), path="/")
        return response

    def csrf_for(request: Request, known: str) -> str:
        return known or request.cookies.get(CSRF_COOKIE) or new_csrf()

    async def form_checked(request: Request, csrf: str) -> Any:
        if not csrf:  # nothing to compare with: refuse before reading the body
            raise _Http(403, "the form expired or did not come from this page: reload and try again")
        form = await request.form()
        if not same_token(str(form.get("csrf", "")), csrf):
            raise _Http(403, "the form expired or did not come from this page: reload and try again")
        return form

    def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status)

    # --- the page --------------------------------------------------------------------------

    def view_args(request: Request) -> dict[str, Any]:
        q = request.query_params
        identity = q.get("identity") or None
        if identity is not None and identity not in inbox.sources:
            raise _Http(404, f"this inbox does not serve identity {identity!r}")
        labels: list[tuple[str, str]] = []
        for raw in q.getlist("label"):
            if raw:
                k, _, v = raw.partition("=")
                labels.append((k, v))
        sort = q.get("sort") or "newest"
        if sort not in SORTS:
            raise _Http(400, f"unknown sort {sort[:40]!r}: one of {', '.join(SORTS)}")
        return {
            "identity": identity,
            "labels": labels,
            "sort": sort,
            "prefix": q.get("prefix", ""),
            "offset": _int(q.get("offset"), 0, 0, 10**9),
            "limit": _int(q.get("limit"), 25, 1, MAX_LIMIT_PAGE),
        }

    async def page_context(request: Request, person: str, csrf: str) -> dict[str, Any]:
        args = view_args(request)
        page = await run_in_threadpool(inbox.page, **args)
        filters = {
            "identity": args["identity"] or "",
            "label": [f"{k}={v}" for k, v in args["labels"]],
            "prefix": args["prefix"],
            "sort": args["sort"],
        }
        return {
            "person": person,
            "csrf": csrf,
            "page": page,
            "identities": inbox.identities,
            "filters": filters,
            "query": lambda **over: _query(filters, args["limit"], **over),
            "logout": auth.required and request.cookies.get(SESSION_COOKIE) is not None,
            "poll_ms": int(poll_seconds * 1000),
            "now": page.snapshot.taken_at,
            "recent": inbox.recent(page.snapshot, identity=args["identity"]),
        }

    async def index(request: Request) -> Response:
        person, known = page_person(request)
        csrf = csrf_for(request, known)
        context = await page_context(request, person, csrf)
        done = request.query_params.get("done")
        context["notice"] = None
        if done and same_token(request.query_params.get("mac"), done_mac(person, done)):
            context["notice"] = {"kind": "ok", "text": f"Answered {done} as {person}.", "card": None}
        elif request.query_params.get("lost"):
            lost = "stale" if request.query_params.get("lost") == "stale" else "session"
            context["notice"] = {
                "kind": "error",
                "text": STALE if lost == "stale" else LOST,
                "card": None,
                "lost": lost,
            }
        return with_csrf_cookie(request, render("inbox.html", **context), csrf)

    async def fragment(request: Request) -> Response:
        person, known = page_person(request)
        context = await page_context(request, person, csrf_for(request, known))
        # what the fragment shows, not its text: relative times change every second and are the script's job
        page = context["page"]
        shown = [(c.item.identity, c.item.key, c.item.token, views.version(c, context["now"])) for c in page.cards]
        counts = [(i, page.snapshot.counts[i].questions) for i in inbox.identities]
        recent = [(g.key, g.question_id, fate) for g, fate in context["recent"]]
        fingerprint = repr((person, context["csrf"], page.total, page.offset, page.limit, shown, counts, recent))
        etag = '"' + hashlib.sha256(fingerprint.encode()).hexdigest()[:32] + '"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"etag": etag})
        html = env.get_template("_live.html").render(**context)
        return HTMLResponse(html, headers={"etag": etag})

    async def answer_form(request: Request) -> Response:
        person, known = page_person(request)
        csrf = csrf_for(request, known)
        try:
            form = await form_checked(request, known or request.cookies.get(CSRF_COOKIE) or "")
        except _Http as exc:  # a page older than this session (logged in again meanwhile): say so, keep the draft
            if exc.status != 403 or not known:
                raise
            context = await page_context(request, person, csrf)
            context["notice"] = {"kind": "error", "text": STALE, "card": None, "lost": "stale"}
            return with_csrf_cookie(request, render("inbox.html", status=403, **context), csrf)
        identity = str(form.get("identity", ""))
        key = str(form.get("key", ""))
        question_id = str(form.get("question_id", ""))
        choice = str(form.get("choice", "respond"))
        body = str(form.get("text", "")).strip()
        back = str(form.get("back", ""))
        if identity not in inbox.sources:
            raise _Http(404, f"this inbox does not serve identity {identity!r}")
        error: str | None = None
        if choice not in DECISIONS:
            raise _Http(400, f"unknown decision {choice[:40]!r}: one of {', '.join(DECISIONS)}")
        arguments = _edited(form) if choice == "edit" else None
        if choice == "respond" and not body:
            error = "Write an answer before sending it."
        if len(body) > MAX_ANSWER_CHARS:
            error = f"An answer is at most {MAX_ANSWER_CHARS} characters."
        status = 400
        fresh: Card | None = None
        if isinstance(arguments, str):
            error, arguments = arguments, None
        if error is None:
            try:
                await run_in_threadpool(
                    inbox.answer,
                    identity,
                    key,
                    question_id,
                    body,
                    by=person,
                    via="page",
                    decision=choice,
                    arguments=arguments,
                )
            except berth.InvalidAnswer as exc:
                error = f"Nothing was recorded: {exc}"
            except Refused as exc:
                status, fresh = exc.status, exc.card
                if exc.status == 404:
                    error = f"Nothing is waiting at {key} any more: it was resumed or removed. Nothing was recorded."
                elif exc.status == 410:
                    fresh = None
                    error = (
                        f"The question at {key} expired before your answer arrived: its run will never resume, "
                        "so nothing was recorded."
                    )
                else:
                    error = _refusal_text(key, question_id, exc.card)
            except berth.InvalidKey as exc:
                raise _Http(400, str(exc)) from exc
            else:
                target = "/?" + urlencode([*_parse_back(back), ("done", key), ("mac", done_mac(person, key))])
                return RedirectResponse(target + "#" + views.card_id(identity, key), status_code=303)
        context = await page_context(request, person, csrf)
        context["notice"] = {"kind": "error", "text": error, "card": fresh, "typed": body}
        return with_csrf_cookie(request, render("inbox.html", status=status, **context), csrf)

    async def answer_get(request: Request) -> Response:
        return RedirectResponse("/", status_code=303)  # a reload after a refused answer, or a stale bookmark

    # --- login -----------------------------------------------------------------------------

    async def login_page(request: Request) -> Response:
        if not auth.login_form:
            return _plain(401, "sign in through the proxy in front of this inbox")
        csrf = request.cookies.get(CSRF_COOKIE) or new_csrf()
        page = render("login.html", csrf=csrf, error=None, next=_local(request.query_params.get("next")))
        return with_csrf_cookie(request, page, csrf)

    async def login(request: Request) -> Response:
        if not auth.login_form:
            return _plain(401, "sign in through the proxy in front of this inbox")
        csrf = request.cookies.get(CSRF_COOKIE) or ""
        form = await form_checked(request, csrf)
        try:
            token_limit(request)
        except _Http as exc:
            limited = render("login.html", status=429, csrf=csrf, error=f"{exc}.", next=_local(form.get("next")))
            limited.headers.update(exc.headers)
            return limited
        made = auth.login(str(form.get("token", "")), client(request))
        if made is None:
            token_failed(request, "failed login")
            csrf = csrf or new_csrf()
            refused = render(
                "login.html", status=401, csrf=csrf, error="That token is not valid.", next=_local(form.get("next"))
            )
            return with_csrf_cookie(request, refused, csrf)
        sid, _session = made
        response = RedirectResponse(_local(form.get("next")), status_code=303)
        response.set_cookie(
            SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=secure(request), path="/", max_age=12 * 3600
        )
        return response

    async def logout(request: Request) -> Response:
        sid = request.cookies.get(SESSION_COOKIE)
        session = auth.session(sid)
        if session is not None:
            await form_checked(request, session.csrf)
            auth.logout(sid)
        response = RedirectResponse("/login" if auth.login_form else "/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    # --- the JSON API ----------------------------------------------------------------------

    async def api_questions(request: Request) -> Response:
        api_person(request)
        q = request.query_params
        args = view_args(request)
        args["limit"] = _int(q.get("limit"), 100, 1, MAX_LIMIT_API)
        page = await run_in_threadpool(inbox.page, **args)
        headers = {}
        if page.next_offset is not None:
            filters = {"identity": args["identity"] or "", "label": [f"{k}={v}" for k, v in args["labels"]]}
            filters.update(prefix=args["prefix"], sort=args["sort"])
            headers["link"] = f'</api/questions?{_query(filters, page.limit, offset=page.next_offset)}>; rel="next"'
        headers["x-total-count"] = str(page.total)
        return JSONResponse([views.question_doc(c) for c in page.cards], headers=headers)

    async def api_answer(request: Request) -> Response:
        person = api_person(request)
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise _Http(415, "send the answer as application/json")
        try:
            doc = await request.json()
        except ValueError as exc:
            raise _Http(400, "the body is not JSON") from exc
        if not isinstance(doc, dict):
            raise _Http(400, 'send {"key": ..., "question_id": ..., "decision": ..., "text": ...}')
        decision, text, arguments = _decision_of(doc)
        missing = [f for f in ("key", "question_id") if not isinstance(doc.get(f), str)]
        if missing:
            raise _Http(400, f"missing or not a string: {', '.join(missing)}")
        if doc.get("identity") is not None and not isinstance(doc["identity"], str):
            raise _Http(400, "identity is not a string")
        broken = _not_unicode(doc)
        if broken:
            raise _Http(400, f"{broken} is not valid Unicode text (a lone surrogate)")
        identity = doc.get("identity") or inbox.identities[0]
        if identity not in inbox.sources:
            raise _Http(404, f"this inbox does not serve identity {identity!r}")
        if len(text) > MAX_ANSWER_CHARS:
            raise _Http(413, f"an answer is at most {MAX_ANSWER_CHARS} characters")
        try:
            done = await run_in_threadpool(
                lambda: inbox.answer(
                    identity,
                    doc["key"],
                    doc["question_id"],
                    text,
                    by=person,
                    via="api",
                    decision=decision,
                    arguments=arguments,
                )
            )
        except Refused as exc:
            body: dict[str, Any] = {"error": str(exc)}
            if exc.card is not None:
                body["question"] = views.question_doc(exc.card)
            return JSONResponse(body, status_code=exc.status)
        except (berth.InvalidKey, berth.InvalidAnswer) as exc:
            raise _Http(400, str(exc)) from exc
        return JSONResponse(views.answer_doc(done.card, done.answer), status_code=201)

    async def api_runs(request: Request) -> Response:
        api_person(request)
        q = request.query_params
        identity = q.get("identity") or inbox.identities[0]
        if identity not in inbox.sources:
            raise _Http(404, f"this inbox does not serve identity {identity!r}")
        offset = _int(q.get("offset"), 0, 0, 10**9)
        limit = _int(q.get("limit"), 100, 1, MAX_LIMIT_API)
        try:
            runs = await run_in_threadpool(inbox.runs, identity, prefix=q.get("prefix", ""), offset=offset, limit=limit)
        except berth.InvalidKey as exc:
            raise _Http(400, str(exc)) from exc
        headers = {}
        if len(runs) == limit:
            filters = {"identity": identity, "prefix": q.get("prefix", ""), "label": []}
            headers["link"] = f'</api/runs?{_query(filters, limit, offset=offset + limit)}>; rel="next"'
        return JSONResponse([views.run_doc(identity, r) for r in runs], headers=headers)

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def listed() -> Snapshot | None:
        """The snapshot, or None while the stores cannot be listed or the last listing is too old."""
        try:
            snap = await run_in_threadpool(inbox.snapshot)
        except berth.BerthError:  # the inbox keeps why; trouble() says it
            return None
        return None if inbox.trouble() else snap

    async def health(request: Request) -> Response:
        if await listed() is None:
            return JSONResponse({"status": "unavailable", "error": inbox.trouble()}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        api_person(request)
        text = views.metrics_text(inbox, auth, await listed())
        if notify is not None:
            text += "\n".join(notify.metrics_lines()) + "\n"
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    # --- errors ----------------------------------------------------------------------------

    async def store_error(request: Request, exc: Exception) -> Response:
        log.error("berth serve: %s", exc)
        return await http_error(request, _Http(503, "the store is not available right now; try again"))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _Http)
        if request.url.path.startswith("/api/") or request.url.path == "/metrics":
            headers = {"www-authenticate": 'Bearer realm="berth"'} if exc.status == 401 else {}
            return JSONResponse({"error": str(exc)}, status_code=exc.status, headers={**headers, **exc.headers})
        response = error_page(exc.status, str(exc))
        response.headers.update(exc.headers)
        return response

    def error_page(status: int, message: str) -> Response:
        """An error a person meets on the page: what happened, and the way back to the inbox."""
        return render("error.html", status=status, code=status, message=message)

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if request.url.path.startswith("/api/") or request.url.path == "/metrics":
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        return error_page(exc.status_code, f"{exc.detail}: there is no page at this address.")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        stop_watching = None
        if notify is not None:
            stop_watching = notify.watch([s.questions for s in inbox.sources.values()], every=notify_every)
        try:
            yield
        finally:
            if notify is not None and stop_watching is not None:
                await run_in_threadpool(stop_watching)
                await run_in_threadpool(notify.close)  # drains the queue for up to its close_timeout, once
            await run_in_threadpool(inbox.close)

    routes = [
        Route("/", index),
        Route("/inbox/live", fragment),
        Route("/answer", answer_form, methods=["POST"]),
        Route("/answer", answer_get),
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/questions", api_questions),
        Route("/api/answers", api_answer, methods=["POST"]),
        Route("/api/runs", api_runs),
        Route("/api/openapi.json", openapi),
        Route("/health", health),
        Route("/metrics", metrics),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        _Http: http_error,
        _LogIn: must_log_in,
        berth.BackendError: store_error,
        HTTPException: not_found,
    }
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.add_middleware(_BodyLimit)
    app.add_middleware(_SecurityHeaders)
    app.add_middleware(_Forwarded, auth=auth)
    return app


def _plain(status: int, message: str) -> Response:
    return PlainTextResponse(message + "\n", status_code=status)


def _not_unicode(value: object, name: str = "the body") -> str | None:
    """The name of the first string in a JSON document that cannot be UTF-8 (a lone surrogate), or None."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return name
    elif isinstance(value, dict):
        for k, v in value.items():
            field = f"{name}[{str(k)[:40]!r}]" if name != "the body" else str(k)[:40]
            found = _not_unicode(k, "a field name") or _not_unicode(v, field)
            if found:
                return found
    elif isinstance(value, list):
        for n, v in enumerate(value):
            found = _not_unicode(v, f"{name}[{n}]")
            if found:
                return found
    return None


def _local(target: object) -> str:
    """`target` if it is a path on this site (never another origin: no open redirect), else `/`."""
    if isinstance(target, str) and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        if all(c.isprintable() for c in target):
            return target
    return "/"


DECISIONS = tuple(d.value for d in berth.Decision)


def _edited(form: Any) -> dict[str, Any] | str:
    """The arguments an edit form sends (`edit_name_<i>`, `edit_kind_<i>`, `edit_value_<i>`), or what is wrong.

    A `str` argument is taken as typed; any other is JSON (a number, true, an object) and must parse.
    """
    arguments: dict[str, Any] = {}
    for i in range(MAX_EDITED_ARGUMENTS):
        name = form.get(f"edit_name_{i}")
        if name is None:
            break
        value = str(form.get(f"edit_value_{i}", ""))
        if form.get(f"edit_kind_{i}") == "str":
            arguments[str(name)] = value.replace("\r\n", "\n")
            continue
        try:
            arguments[str(name)] = json.loads(value)
        except ValueError:
            return (
                f"Nothing was recorded: the argument {name!s} is not valid JSON "
                "(a number, true, false, null, a list or an object)."
            )
    return arguments


def _decision_of(doc: dict[str, Any]) -> tuple[str | None, str, dict[str, Any] | None]:
    """`(decision, text, arguments)` of a `POST /api/answers` body, or 400: what is malformed.

    Without `decision` the `text` is the answer (read by `berth.QuestionStore.provide`: free text never
    approves); with one, `text` is its reason, note or response (default ""), and `edit` needs `arguments`,
    a JSON object.
    """
    decision = doc.get("decision")
    text = doc.get("text", None if decision is None else "")
    arguments = doc.get("arguments")
    if decision is not None and decision not in DECISIONS:
        raise _Http(400, f"decision must be one of {', '.join(DECISIONS)}")
    if not isinstance(text, str):
        raise _Http(400, "missing or not a string: text" if decision is None else "text must be a string")
    if decision == "edit":
        if not isinstance(arguments, dict):
            raise _Http(400, "an edit needs arguments: a JSON object of the tool's new arguments")
    elif arguments is not None:
        raise _Http(400, "arguments are sent only with the edit decision")
    return decision, text, arguments


def _int(raw: str | None, default: int, low: int, high: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise _Http(400, f"not a whole number: {raw[:40]!r}") from exc
    return min(max(value, low), high)


def _query(filters: dict[str, Any], limit: int, **over: Any) -> str:
    pairs: list[tuple[str, str]] = []
    merged = {**filters, **over}
    for name in ("identity", "prefix"):
        if merged.get(name):
            pairs.append((name, str(merged[name])))
    if merged.get("sort", "newest") != "newest":
        pairs.append(("sort", str(merged["sort"])))
    pairs += [("label", lab) for lab in merged.get("label", [])]
    if merged.get("offset"):
        pairs.append(("offset", str(merged["offset"])))
    if limit != 25:
        pairs.append(("limit", str(limit)))
    return urlencode(pairs)


def _parse_back(back: str) -> Sequence[tuple[str, str]]:
    from urllib.parse import parse_qsl

    return [(k, v) for k, v in parse_qsl(back) if k in ("identity", "prefix", "label", "offset", "limit", "sort")]


def _refusal_text(key: str, question_id: str, card: Card | None) -> str:
    if card is None:
        return f"Nothing is waiting at {key} any more. Nothing was recorded."
    if card.question.id != question_id:
        return f"The question at {key} changed before your answer arrived, so nothing was recorded. The new question:"
    assert card.answer is not None
    when = card.answer.answered_at
    return f"{key} was already answered by {card.answer.by} at {_hm(when)}. Your answer was not recorded."


def _hm(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M UTC")
