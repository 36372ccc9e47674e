"""The inbox's page handlers: the page and its live fragment, the answer form, login and logout.

Each is a plain function of the request over the app's `InboxState` (`berth._serve._state`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

import berth
from berth._serve import _views as views
from berth._serve._auth import CSRF_COOKIE, SESSION_COOKIE, new_csrf, same_token
from berth._serve._inbox import Card, Refused
from berth._serve._state import (
    DECISIONS,
    MAX_ANSWER_CHARS,
    HttpError,
    InboxState,
    client,
    csrf_for,
    form_checked,
    page_person,
    plain,
    query_string,
    render,
    secure,
    state,
    token_failed,
    token_limit,
    view_args,
    with_csrf_cookie,
)

__all__ = ["answer_form", "answer_get", "fragment", "index", "login", "login_page", "logout"]

MAX_EDITED_ARGUMENTS = 1000
LOST = "Your session ended before your answer arrived, so nothing was recorded."
STALE = "That page was from an earlier session (you logged in again since), so nothing was recorded."
NO_LOGIN_FORM = "sign in through the proxy in front of this inbox"


async def _page_context(st: InboxState, request: Request, person: str, csrf: str) -> dict[str, Any]:
    args = view_args(st, request)
    page = await run_in_threadpool(st.inbox.page, **args)
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
        "identities": st.inbox.identities,
        "filters": filters,
        "query": partial(query_string, filters, args["limit"]),
        "logout": st.auth.required and request.cookies.get(SESSION_COOKIE) is not None,
        "poll_ms": int(st.poll_seconds * 1000),
        "now": page.snapshot.taken_at,
        "recent": st.inbox.recent(page.snapshot, identity=args["identity"]),
    }


async def index(request: Request) -> Response:
    """`GET /`: the inbox page, with a notice after an answer or a lost session."""
    st = state(request)
    person, known = page_person(st, request)
    csrf = csrf_for(request, known)
    context = await _page_context(st, request, person, csrf)
    done = request.query_params.get("done")
    context["notice"] = None
    if done and same_token(request.query_params.get("mac"), st.done_mac(person, done)):
        context["notice"] = {"kind": "ok", "text": f"Answered {done} as {person}.", "card": None}
    elif request.query_params.get("lost"):
        lost = "stale" if request.query_params.get("lost") == "stale" else "session"
        context["notice"] = {
            "kind": "error",
            "text": STALE if lost == "stale" else LOST,
            "card": None,
            "lost": lost,
        }
    return with_csrf_cookie(st, request, render(st, "inbox.html", **context), csrf)


async def fragment(request: Request) -> Response:
    """`GET /inbox/live`: the cards an open page swaps in, 304 while nothing it shows has changed."""
    st = state(request)
    person, known = page_person(st, request)
    context = await _page_context(st, request, person, csrf_for(request, known))
    # what the fragment shows, not its text: relative times change every second and are the script's job
    page = context["page"]
    shown = [(c.item.identity, c.item.key, c.item.token, views.version(c, context["now"])) for c in page.cards]
    counts = [(i, page.snapshot.counts[i].questions) for i in st.inbox.identities]
    recent = [(g.key, g.question_id, fate) for g, fate in context["recent"]]
    fingerprint = repr((person, context["csrf"], page.total, page.offset, page.limit, shown, counts, recent))
    etag = '"' + hashlib.sha256(fingerprint.encode()).hexdigest()[:32] + '"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"etag": etag})
    html = st.templates.get_template("_live.html").render(**context)
    return HTMLResponse(html, headers={"etag": etag})


async def answer_form(request: Request) -> Response:
    """`POST /answer`: a person's answer from the page; back to the inbox, or the page again saying why not."""
    st = state(request)
    person, known = page_person(st, request)
    csrf = csrf_for(request, known)
    try:
        form = await form_checked(request, known or request.cookies.get(CSRF_COOKIE) or "")
    except HttpError as exc:  # a page older than this session (logged in again meanwhile): say so, keep the draft
        if exc.status != 403 or not known:
            raise
        context = await _page_context(st, request, person, csrf)
        context["notice"] = {"kind": "error", "text": STALE, "card": None, "lost": "stale"}
        return with_csrf_cookie(st, request, render(st, "inbox.html", status=403, **context), csrf)
    identity = str(form.get("identity", ""))
    key = str(form.get("key", ""))
    question_id = str(form.get("question_id", ""))
    choice = str(form.get("choice", "respond"))
    body = str(form.get("text", "")).strip()
    back = str(form.get("back", ""))
    if identity not in st.inbox.sources:
        raise HttpError(404, f"this inbox does not serve identity {identity!r}")
    error: str | None = None
    if choice not in DECISIONS:
        raise HttpError(400, f"unknown decision {choice[:40]!r}: one of {', '.join(DECISIONS)}")
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
                st.inbox.answer,
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
            raise HttpError(400, str(exc)) from exc
        else:
            target = "/?" + urlencode([*_parse_back(back), ("done", key), ("mac", st.done_mac(person, key))])
            return RedirectResponse(target + "#" + views.card_id(identity, key), status_code=303)
    context = await _page_context(st, request, person, csrf)
    context["notice"] = {"kind": "error", "text": error, "card": fresh, "typed": body}
    return with_csrf_cookie(st, request, render(st, "inbox.html", status=status, **context), csrf)


async def answer_get(request: Request) -> Response:
    """`GET /answer`: a reload after a refused answer, or a stale bookmark: back to the inbox."""
    return RedirectResponse("/", status_code=303)


# --- login -----------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    """`GET /login`: the token form."""
    st = state(request)
    if not st.auth.login_form:
        return plain(401, NO_LOGIN_FORM)
    csrf = request.cookies.get(CSRF_COOKIE) or new_csrf()
    page = render(st, "login.html", csrf=csrf, error=None, next=_local(request.query_params.get("next")))
    return with_csrf_cookie(st, request, page, csrf)


async def login(request: Request) -> Response:
    """`POST /login`: a token for a session cookie, then on to `next`."""
    st = state(request)
    if not st.auth.login_form:
        return plain(401, NO_LOGIN_FORM)
    csrf = request.cookies.get(CSRF_COOKIE) or ""
    form = await form_checked(request, csrf)
    try:
        token_limit(st, request)
    except HttpError as exc:
        limited = render(st, "login.html", status=429, csrf=csrf, error=f"{exc}.", next=_local(form.get("next")))
        limited.headers.update(exc.headers)
        return limited
    made = st.auth.login(str(form.get("token", "")), client(request))
    if made is None:
        token_failed(st, request, "failed login")
        csrf = csrf or new_csrf()
        refused = render(
            st, "login.html", status=401, csrf=csrf, error="That token is not valid.", next=_local(form.get("next"))
        )
        return with_csrf_cookie(st, request, refused, csrf)
    sid, _session = made
    response = RedirectResponse(_local(form.get("next")), status_code=303)
    response.set_cookie(
        SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=secure(st, request), path="/", max_age=12 * 3600
    )
    return response


async def logout(request: Request) -> Response:
    """`POST /logout`: the session ended, its cookie removed."""
    st = state(request)
    sid = request.cookies.get(SESSION_COOKIE)
    session = st.auth.session(sid)
    if session is not None:
        await form_checked(request, session.csrf)
        st.auth.logout(sid)
    response = RedirectResponse("/login" if st.auth.login_form else "/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# --- the form's parts ------------------------------------------------------------------------


def _local(target: object) -> str:
    """`target` if it is a path on this site (never another origin: no open redirect), else `/`."""
    if isinstance(target, str) and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        if all(c.isprintable() for c in target):
            return target
    return "/"


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


def _parse_back(back: str) -> Sequence[tuple[str, str]]:
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
