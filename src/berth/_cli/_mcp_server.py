"""What `berth mcp` serves: the MCP server over the inbox, behind `berth serve`'s authentication over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from berth._errors import BerthError, where
from berth._serve._inbox import Refused
from berth._serve._views import answer_doc, question_doc

__all__ = ["build_server", "guard", "person_of"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
_PERSON = "berth.person"  # where `guard` leaves the authenticated person in the ASGI scope


def build_server(inbox: Any, identity: str, person: Callable[[Any], str]) -> MCPServer:
    """The MCP server (`MCPServer`) over `inbox` for `identity`; `person(ctx)` is who answers a request."""
    server = MCPServer(
        "berth",
        instructions=(
            f"Questions that parked runs of {where(identity)} wait on. List them with list_questions; answer one "
            "with answer_question, naming the question_id you were shown (an answer to any other question is refused)."
        ),
    )

    @server.tool()
    async def list_questions(prefix: str = "") -> list[dict[str, Any]]:
        """The open questions (newest first) under keys starting with `prefix`: prompt, tool call, decisions."""
        page = await asyncio.to_thread(inbox.page, identity=identity, prefix=prefix, limit=1000)
        return [question_doc(card) for card in page.cards]

    @server.tool()
    async def answer_question(
        ctx: Context,
        key: str,
        question_id: str,
        decision: str | None = None,
        text: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Answer the question `question_id` pending at `key`, as it was shown by list_questions.

        `decision` is one the question accepts (approve, reject, edit, respond, ignore); `text` the reason,
        note or response; `arguments` the new arguments of an edit. Refused if the question was superseded,
        already answered, or its deadline has passed.
        """
        who = person(ctx)
        try:
            given = await asyncio.to_thread(
                inbox.answer,
                identity,
                key,
                question_id,
                text,
                by=who,
                via="mcp",
                decision=decision,
                arguments=arguments,
            )
        except Refused as exc:
            raise ToolError(f"refused ({exc.status}): {exc}") from None
        except BerthError as exc:
            raise ToolError(str(exc)) from None
        return answer_doc(given.card, given.answer)

    return server


def guard(app: ASGIApp, auth: Any) -> ASGIApp:
    """`app` behind `berth serve`'s authentication: a bearer token or the trusted proxy header, else 401.

    Wrong tokens count against the client's address as the inbox's do (429 once over the limit). The
    person the credentials name is left in the scope for the tools (`person_of`).
    """

    async def guarded(
        scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        peer = (scope.get("client") or ("?", 0))[0]
        authorization = headers.get("authorization")
        if auth.presents_token(authorization) and auth.refused_for(peer):
            await _deny(send, 429, "too many wrong tokens from this address: wait and retry")
            return
        person = auth.bearer(authorization) or auth.from_header(headers, peer)
        if person is None and auth.required:
            if auth.presents_token(authorization):
                auth.failed(peer, login=False)
            await _deny(send, 401, "authentication required: Authorization: Bearer TOKEN (BERTH_SERVE_TOKEN)")
            return
        scope.setdefault("state", {})[_PERSON] = person or auth.local_person
        await app(scope, receive, send)

    return guarded


async def _deny(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def person_of(ctx: Any, default: str) -> str:
    """The person `guard` authenticated for this HTTP request; `default` on stdio."""
    request = getattr(ctx.request_context, "request", None) if ctx is not None else None
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    person = state.get(_PERSON)
    return person if isinstance(person, str) and person else default
