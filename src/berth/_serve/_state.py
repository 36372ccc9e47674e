"""The inbox app's one state object, and what every handler asks of a request.

`InboxState` is built once by `create_app` and held in `app.state.inbox_state`; `state(request)`
hands it to a handler. The rest are plain functions of it and a request: who is asking (a page
session, a bearer token, the trusted header, or loopback without authentication), its filters,
its form (CSRF checked), and a rendered page.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

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
from berth._serve._inbox import SORTS, Inbox

__all__ = [
    "DECISIONS",
    "HERE",
    "MAX_ANSWER_CHARS",
    "MAX_LIMIT_API",
    "HttpError",
    "InboxState",
    "LogIn",
    "api_person",
    "client",
    "csrf_for",
    "form_checked",
    "log",
    "page_person",
    "plain",
    "query_string",
    "render",
    "secure",
    "state",
    "token_failed",
    "token_limit",
    "view_args",
    "whole_number",
    "with_csrf_cookie",
]

HERE = Path(__file__).parent
MAX_LIMIT_PAGE = 100
MAX_LIMIT_API = 1000
MAX_ANSWER_CHARS = 65536
DECISIONS = tuple(d.value for d in berth.Decision)

log = logging.getLogger("berth.serve")


class HttpError(Exception):
    """A request refused with `status`: a JSON error on the API and /metrics, the error page elsewhere."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class LogIn(Exception):
    """The request must log in first (the login page, or 401 where there is none)."""


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


@dataclass
class InboxState:
    """Everything the inbox's handlers share: what `create_app` was given, the templates, the notice key.

    `notice_key` signs the key in the "answered" notice's link, so no link can put other text there.
    """

    inbox: Inbox
    auth: Auth
    poll_seconds: float = 3.0
    secure_cookies: bool | None = None
    notify: berth.Webhook | None = None
    notify_every: float = 5.0
    templates: jinja2.Environment = field(default_factory=_templates, repr=False)
    notice_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def done_mac(self, person: str, key: str) -> str:
        """The signature of the "answered `key` as `person`" notice."""
        return hmac.new(self.notice_key, f"{person}\0{key}".encode(), hashlib.sha256).hexdigest()[:32]


def state(request: Request) -> InboxState:
    """The app's `InboxState`."""
    held: InboxState = request.app.state.inbox_state
    return held


# --- who is asking ---------------------------------------------------------------------------


def _loopback_host(request: Request) -> bool:
    return is_loopback(request.url.hostname or "")


def _unauthenticated(st: InboxState, request: Request) -> str:
    """The local person, when the inbox runs without authentication and is reached by a loopback name."""
    if not _loopback_host(request):
        raise HttpError(421, "without authentication the inbox answers only to a loopback host name")
    return st.auth.local_person


def page_person(st: InboxState, request: Request) -> tuple[str, str]:
    """(person, the CSRF token its forms carry, or "" before one is set) for a page request.

    Raises LogIn when the request must log in first.
    """
    auth = st.auth
    person = auth.from_header(request.headers, request.scope.get("berth.peer"))
    session = auth.session(request.cookies.get(SESSION_COOKIE))
    if session is not None:
        return session.person, session.csrf
    if person is not None:
        return person, request.cookies.get(CSRF_COOKIE) or ""
    if not auth.required:
        return _unauthenticated(st, request), request.cookies.get(CSRF_COOKIE) or ""
    raise LogIn()


def api_person(st: InboxState, request: Request) -> str:
    """The person an API request (or /metrics) is from: a bearer token, the trusted header, or 401."""
    auth = st.auth
    authorization = request.headers.get("authorization")
    person = None
    if auth.presents_token(authorization):
        token_limit(st, request)
        person = auth.bearer(authorization)
        if person is None:
            token_failed(st, request, "wrong bearer token")
    person = person or auth.from_header(request.headers, request.scope.get("berth.peer"))
    if person is not None:
        return person
    if not auth.required:
        return _unauthenticated(st, request)
    raise HttpError(401, "authentication required: send Authorization: Bearer <BERTH_SERVE_TOKEN>")


def client(request: Request) -> str:
    """The client's address (behind a trusted proxy, the one it forwarded)."""
    return request.client.host if request.client else "?"


def token_limit(st: InboxState, request: Request) -> None:
    """Refuse (429) a token from a client address that gave too many wrong ones lately."""
    wait = st.auth.refused_for(client(request))
    if wait:
        seconds = str(math.ceil(wait))
        raise HttpError(
            429, f"too many wrong tokens from {client(request)}: try again in {seconds} s", {"retry-after": seconds}
        )


def token_failed(st: InboxState, request: Request, what: str) -> None:
    """Log and count a wrong token (`what`: "wrong bearer token" or "failed login")."""
    peer = client(request)
    log.warning("berth serve: %s from %s on %s %s", what, peer, request.method, request.url.path)
    if st.auth.failed(peer, login=what == "failed login"):
        log.warning(
            "berth serve: %d wrong tokens from %s within %g s: its tokens are refused (429) for as long",
            FAILURES_ALLOWED,
            peer,
            FAILURE_WINDOW,
        )


# --- cookies, forms and pages ----------------------------------------------------------------


def with_csrf_cookie(st: InboxState, request: Request, response: Response, csrf: str) -> Response:
    """`response`, setting the CSRF cookie to `csrf` when the request did not carry it."""
    if request.cookies.get(CSRF_COOKIE) != csrf:
        response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=secure(st, request), path="/")
    return response


def secure(st: InboxState, request: Request) -> bool:
    """Whether cookies are marked Secure: as configured, else when the request came over https."""
    return request.url.scheme == "https" if st.secure_cookies is None else st.secure_cookies


def csrf_for(request: Request, known: str) -> str:
    """The CSRF token a page's forms carry: the session's, the cookie's, or a new one."""
    return known or request.cookies.get(CSRF_COOKIE) or new_csrf()


async def form_checked(request: Request, csrf: str) -> Any:
    """The request's form, refused (403) unless it carries `csrf`."""
    if not csrf:  # nothing to compare with: refuse before reading the body
        raise HttpError(403, "the form expired or did not come from this page: reload and try again")
    form = await request.form()
    if not same_token(str(form.get("csrf", "")), csrf):
        raise HttpError(403, "the form expired or did not come from this page: reload and try again")
    return form


def render(st: InboxState, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The template `name` rendered with `context`."""
    html = st.templates.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status)


def plain(status: int, message: str) -> Response:
    """A one-line text response."""
    return PlainTextResponse(message + "\n", status_code=status)


# --- the query -------------------------------------------------------------------------------


def view_args(st: InboxState, request: Request) -> dict[str, Any]:
    """`Inbox.page`'s arguments from the query: identity, labels, sort, prefix, offset, limit (400/404 when wrong)."""
    q = request.query_params
    identity = q.get("identity") or None
    if identity is not None and identity not in st.inbox.sources:
        raise HttpError(404, f"this inbox does not serve identity {identity!r}")
    labels: list[tuple[str, str]] = []
    for raw in q.getlist("label"):
        if raw:
            k, _, v = raw.partition("=")
            labels.append((k, v))
    sort = q.get("sort") or "newest"
    if sort not in SORTS:
        raise HttpError(400, f"unknown sort {sort[:40]!r}: one of {', '.join(SORTS)}")
    return {
        "identity": identity,
        "labels": labels,
        "sort": sort,
        "prefix": q.get("prefix", ""),
        "offset": whole_number(q.get("offset"), 0, 0, 10**9),
        "limit": whole_number(q.get("limit"), 25, 1, MAX_LIMIT_PAGE),
    }


def whole_number(raw: str | None, default: int, low: int, high: int) -> int:
    """`raw` as an int within [low, high], `default` when absent (400 when it is not a whole number)."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise HttpError(400, f"not a whole number: {raw[:40]!r}") from exc
    return min(max(value, low), high)


def query_string(filters: dict[str, Any], limit: int, **over: Any) -> str:
    """The query of a page (or the API's next page) with `filters`, `limit` and `over`, defaults left out."""
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
