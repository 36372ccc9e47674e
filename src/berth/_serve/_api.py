"""The inbox's JSON API, /health and /metrics.

Each handler is a plain function of the request over the app's `InboxState` (`berth._serve._state`).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

import berth
from berth._serve import _views as views
from berth._serve._inbox import Refused, Snapshot
from berth._serve._openapi import OPENAPI
from berth._serve._state import (
    DECISIONS,
    MAX_ANSWER_CHARS,
    MAX_LIMIT_API,
    HttpError,
    InboxState,
    api_person,
    query_string,
    state,
    view_args,
    whole_number,
)

__all__ = ["api_answer", "api_questions", "api_runs", "health", "metrics", "openapi"]


async def api_questions(request: Request) -> Response:
    """`GET /api/questions`: open questions, filtered and paged as the page is (a `link` to the next page)."""
    st = state(request)
    api_person(st, request)
    q = request.query_params
    args = view_args(st, request)
    args["limit"] = whole_number(q.get("limit"), 100, 1, MAX_LIMIT_API)
    page = await run_in_threadpool(st.inbox.page, **args)
    headers = {}
    if page.next_offset is not None:
        filters = {"identity": args["identity"] or "", "label": [f"{k}={v}" for k, v in args["labels"]]}
        filters.update(prefix=args["prefix"], sort=args["sort"])
        headers["link"] = f'</api/questions?{query_string(filters, page.limit, offset=page.next_offset)}>; rel="next"'
    headers["x-total-count"] = str(page.total)
    return JSONResponse([views.question_doc(c) for c in page.cards], headers=headers)


async def api_answer(request: Request) -> Response:
    """`POST /api/answers`: an answer as JSON; 201 with what was recorded, or why not."""
    st = state(request)
    person = api_person(st, request)
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise HttpError(415, "send the answer as application/json")
    try:
        doc = await request.json()
    except ValueError as exc:
        raise HttpError(400, "the body is not JSON") from exc
    if not isinstance(doc, dict):
        raise HttpError(400, 'send {"key": ..., "question_id": ..., "decision": ..., "text": ...}')
    decision, text, arguments = _decision_of(doc)
    missing = [f for f in ("key", "question_id") if not isinstance(doc.get(f), str)]
    if missing:
        raise HttpError(400, f"missing or not a string: {', '.join(missing)}")
    if doc.get("identity") is not None and not isinstance(doc["identity"], str):
        raise HttpError(400, "identity is not a string")
    broken = _not_unicode(doc)
    if broken:
        raise HttpError(400, f"{broken} is not valid Unicode text (a lone surrogate)")
    identity = doc.get("identity") or st.inbox.identities[0]
    if identity not in st.inbox.sources:
        raise HttpError(404, f"this inbox does not serve identity {identity!r}")
    if len(text) > MAX_ANSWER_CHARS:
        raise HttpError(413, f"an answer is at most {MAX_ANSWER_CHARS} characters")
    try:
        done = await run_in_threadpool(
            st.inbox.answer,
            identity,
            doc["key"],
            doc["question_id"],
            text,
            by=person,
            via="api",
            decision=decision,
            arguments=arguments,
        )
    except Refused as exc:
        body: dict[str, Any] = {"error": str(exc)}
        if exc.card is not None:
            body["question"] = views.question_doc(exc.card)
        return JSONResponse(body, status_code=exc.status)
    except (berth.InvalidKey, berth.InvalidAnswer) as exc:
        raise HttpError(400, str(exc)) from exc
    return JSONResponse(views.answer_doc(done.card, done.answer), status_code=201)


async def api_runs(request: Request) -> Response:
    """`GET /api/runs`: the headers of parked runs of one identity, paged (a `link` to the next page)."""
    st = state(request)
    api_person(st, request)
    q = request.query_params
    identity = q.get("identity") or st.inbox.identities[0]
    if identity not in st.inbox.sources:
        raise HttpError(404, f"this inbox does not serve identity {identity!r}")
    offset = whole_number(q.get("offset"), 0, 0, 10**9)
    limit = whole_number(q.get("limit"), 100, 1, MAX_LIMIT_API)
    try:
        runs = await run_in_threadpool(st.inbox.runs, identity, prefix=q.get("prefix", ""), offset=offset, limit=limit)
    except berth.InvalidKey as exc:
        raise HttpError(400, str(exc)) from exc
    headers = {}
    if len(runs) == limit:
        filters = {"identity": identity, "prefix": q.get("prefix", ""), "label": []}
        headers["link"] = f'</api/runs?{query_string(filters, limit, offset=offset + limit)}>; rel="next"'
    return JSONResponse([views.run_doc(identity, r) for r in runs], headers=headers)


async def openapi(request: Request) -> Response:
    """`GET /api/openapi.json`: the API's OpenAPI description."""
    return JSONResponse(OPENAPI)


async def _listed(st: InboxState) -> Snapshot | None:
    """The snapshot, or None while the stores cannot be listed or the last listing is too old."""
    try:
        snap = await run_in_threadpool(st.inbox.snapshot)
    except berth.BerthError:  # the inbox keeps why; trouble() says it
        return None
    return None if st.inbox.trouble() else snap


async def health(request: Request) -> Response:
    """`GET /health`: 200 while the stores can be listed, else 503 saying why (no authentication)."""
    st = state(request)
    if await _listed(st) is None:
        return JSONResponse({"status": "unavailable", "error": st.inbox.trouble()}, status_code=503)
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """`GET /metrics`: the inbox's figures (and the webhook's) in Prometheus's text format."""
    st = state(request)
    api_person(st, request)
    text = views.metrics_text(st.inbox, st.auth, await _listed(st))
    if st.notify is not None:
        text += "\n".join(st.notify.metrics_lines()) + "\n"
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


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
        raise HttpError(400, f"decision must be one of {', '.join(DECISIONS)}")
    if not isinstance(text, str):
        raise HttpError(400, "missing or not a string: text" if decision is None else "text must be a string")
    if decision == "edit":
        if not isinstance(arguments, dict):
            raise HttpError(400, "an edit needs arguments: a JSON object of the tool's new arguments")
    elif arguments is not None:
        raise HttpError(400, "arguments are sent only with the edit decision")
    return decision, text, arguments
