"""berth.mcp.Tasks: the MCP Tasks extension with berth as its store, against the real SDK (in-process clients).

Tasks created on one server instance are read, answered and cancelled on another sharing the store;
an answer resumes a task once; a task is bound to its principal, sealed at rest, survives a restart
and a key rotation, and fails at its deadline without resuming. A named person's answer given in the
question store completes the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import berth
import berth.aio

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install -e '.[mcp]'")

from mcp import Client  # noqa: E402
from mcp.client.session import ClientRequestContext  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import (  # noqa: E402
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    InputRequest,
    InputRequiredResult,
    InputResponse,
    TextContent,
)

import berth.mcp  # noqa: E402
from berth.mcp._wire import CreateTaskResult  # noqa: E402
from tests.test_mcp import url  # noqa: E402, F401  (the backends fixture)

ASK: dict[str, InputRequest] = {
    "ok": ElicitRequest(
        params=ElicitRequestFormParams(message="deploy?", requested_schema={"type": "object", "properties": {}})
    )
}
YES: dict[str, InputResponse] = {"ok": ElicitResult(action="accept", content={})}
WHO: contextvars.ContextVar[str | None] = contextvars.ContextVar("who", default="carol")


def _principal(ctx: Any) -> str | None:
    return WHO.get()


def _site(where: str, keyring: berth.Keyring, clock: Any = None) -> tuple[berth.aio.AsyncStore, Any]:
    sealer = berth.AesGcmSealer(keyring)
    store = berth.aio.open_store(where, identity="mcp-tasks", sealer=sealer, clock=clock)
    questions = berth.aio.open_questions(where, identity="mcp-tasks", sealer=sealer)
    return store, questions


def _server(store: Any, questions: Any, ran: Counter[str], **kw: Any) -> MCPServer:
    tasks = berth.mcp.Tasks(store, questions=questions, principal=_principal, **kw)
    server = tasks.bind(MCPServer("ops", extensions=[tasks]))

    @server.tool()
    async def deploy(env: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        if ctx.input_responses is None:
            return InputRequiredResult(input_requests=ASK, request_state=f"asked about {env}")
        ran[env] += 1
        return CallToolResult(content=[TextContent(type="text", text=f"deployed {env} ({ctx.request_state})")])

    @server.tool()
    async def delete_repo(repo: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        answer = berth.mcp.Tasks.answer(ctx)
        if answer is None:
            return berth.mcp.Tasks.ask_person(
                "maintainers", f"Delete {repo}?", tool="delete_repo", arguments={"repo": repo}, state=repo
            )
        ran[repo] += 1
        said = f"{answer.decision.value} by {answer.by} ({berth.mcp.Tasks.state(ctx)})"
        return CallToolResult(
            content=[TextContent(type="text", text=said)], is_error=answer.decision.value != "approve"
        )

    return server


@contextlib.asynccontextmanager
async def _two_instances(where: str, ran: Counter[str]) -> AsyncIterator[tuple[Client, Client, Any, Any]]:
    """Two server instances over one store (each with its own handles), and a client of each."""
    keyring = berth.Keyring.generate()
    (sa, qa), (sb, qb) = _site(where, keyring), _site(where, keyring)
    async with sa, qa, sb, qb, _client(_server(sa, qa, ran)) as ca, _client(_server(sb, qb, ran)) as cb:
        yield ca, cb, qa, qb


def _client(server: MCPServer) -> Client:
    return Client(server, extensions=[berth.mcp.TasksClient()])


async def _start(client: Client, tool: str, args: dict[str, Any]) -> Any:
    created = await client.session.call_tool(tool, args, allow_claimed=True)
    assert isinstance(created, CreateTaskResult), created
    return created


def _said(task: Any) -> str:
    result = task.call_tool_result()
    assert result is not None, task
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_an_input_required_task_is_answered_on_another_instance_once(url: str) -> None:  # noqa: F811
    async def main() -> None:
        ran: Counter[str] = Counter()
        async with _two_instances(url, ran) as (ca, cb, qa, qb):
            created = await _start(ca, "deploy", {"env": "prod"})
            assert created.status == "input_required" and created.ttl_ms == 14 * 24 * 3600 * 1000
            seen = await berth.mcp.get_task(cb, created.task_id)
            assert seen.status == "input_required" and seen.input_requests is not None
            assert set(seen.input_requests) == {"ok"}
            # the same answer sent twice, at once, to both instances: one runs the tool, the other is told
            outcomes = await asyncio.gather(
                berth.mcp.update_task(ca, created.task_id, YES),
                berth.mcp.update_task(cb, created.task_id, YES),
                return_exceptions=True,
            )
            assert sum(o is None for o in outcomes) == 1, outcomes
            assert all(o is None or isinstance(o, MCPError) for o in outcomes), outcomes
            done = await berth.mcp.get_task(ca, created.task_id)
            assert done.status == "completed" and _said(done) == "deployed prod (asked about prod)"
            with pytest.raises(MCPError, match="completed: it takes no input"):
                await berth.mcp.update_task(cb, created.task_id, YES)
            assert ran == Counter({"prod": 1})

    asyncio.run(main())


def test_a_task_is_only_its_principals_and_is_sealed_at_rest(tmp_path: Path) -> None:
    async def main() -> None:
        keyring, ran = berth.Keyring.generate(), Counter[str]()
        store, questions = _site(f"sqlite:///{tmp_path}/berth.db", keyring)
        async with store, questions, _client(_server(store, questions, ran)) as client:
            created = await _start(client, "deploy", {"env": "secret-env-name"})
            token = WHO.set("mallory")
            try:
                for call in (berth.mcp.get_task, berth.mcp.cancel_task):
                    with pytest.raises(MCPError, match="unknown task"):
                        await call(client, created.task_id)
                with pytest.raises(MCPError, match="unknown task"):
                    await berth.mcp.update_task(client, created.task_id, YES)
            finally:
                WHO.reset(token)
            for bad in ("", "x" * 22, "../" + created.task_id[3:]):
                with pytest.raises(MCPError, match="unknown task"):
                    await berth.mcp.get_task(client, bad)
            assert (await berth.mcp.get_task(client, created.task_id)).status == "input_required"
            assert ran == Counter()
        raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
        assert created.task_id.encode() in raw  # the key is in the clear, the call is not
        assert b"secret-env-name" not in raw and b"asked about" not in raw and b"deploy?" not in raw

    asyncio.run(main())


def test_a_task_survives_a_server_restart_and_a_key_rotation(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/berth.db"
    keyring = berth.Keyring.generate()
    ran: Counter[str] = Counter()

    async def first() -> str:
        store, questions = _site(db, keyring)
        async with store, questions, _client(_server(store, questions, ran)) as client:
            return str((await _start(client, "deploy", {"env": "prod"})).task_id)

    async def after(ring: berth.Keyring, task_id: str) -> Any:
        store, questions = _site(db, ring)
        async with store, questions, _client(_server(store, questions, ran)) as client:
            assert (await berth.mcp.get_task(client, task_id)).status == "input_required"
            await berth.mcp.update_task(client, task_id, YES)
            return await berth.mcp.get_task(client, task_id)

    restarted = asyncio.run(after(keyring, asyncio.run(first())))  # each asyncio.run: a new server, new handles
    assert _said(restarted) == "deployed prod (asked about prod)"
    rotated = keyring.rotate()  # a new primary key; the task was sealed under the old one
    done = asyncio.run(after(rotated, asyncio.run(first())))
    assert done.status == "completed" and ran == Counter({"prod": 2})


def test_a_task_fails_at_its_deadline_and_never_resumes() -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    async def main() -> None:
        keyring, ran = berth.Keyring.generate(), Counter[str]()
        store, questions = _site("memory://mcp-tasks-expiry", keyring, clock=lambda: now[0])
        async with store, questions, _client(_server(store, questions, ran, lifetime=timedelta(days=2))) as client:
            created = await _start(client, "deploy", {"env": "prod"})
            person = await _start(client, "delete_repo", {"repo": "acme/old"})
            now[0] += timedelta(days=2)  # at the deadline: still answerable
            assert (await berth.mcp.get_task(client, created.task_id)).status == "input_required"
            (q,) = [q async for q, _ in questions.list("mcp/to/")]
            now[0] += timedelta(seconds=1)  # past it
            await questions.provide(q.key, q.id, "", by="alice", decision="approve")
            for task_id in (created.task_id, person.task_id):
                expired = await berth.mcp.get_task(client, task_id)
                assert expired.status == "failed" and "expired at 2026-01-03T00:00:00Z" in (
                    expired.status_message or ""
                )
            with pytest.raises(MCPError, match="expired"):
                await berth.mcp.update_task(client, created.task_id, YES)
            assert (await berth.mcp.cancel_task(client, created.task_id)).status == "failed"
            assert ran == Counter()

    asyncio.run(main())


def test_a_cancelled_task_is_terminal() -> None:
    async def main() -> None:
        keyring, ran = berth.Keyring.generate(), Counter[str]()
        store, questions = _site("memory://mcp-tasks-cancel", keyring)
        async with store, questions, _client(_server(store, questions, ran)) as client:
            created = await _start(client, "deploy", {"env": "prod"})
            assert (await berth.mcp.cancel_task(client, created.task_id)).status == "cancelled"
            assert (await berth.mcp.cancel_task(client, created.task_id)).status == "cancelled"
            with pytest.raises(MCPError, match="cancelled: it takes no input"):
                await berth.mcp.update_task(client, created.task_id, YES)
            person = await _start(client, "delete_repo", {"repo": "acme/old"})
            assert [q.key async for q, _ in questions.list("mcp/to/")] == [f"mcp/to/maintainers/{person.task_id}"]
            await berth.mcp.cancel_task(client, person.task_id)
            assert [q async for q in questions.list("mcp/to/")] == []  # the person is no longer asked
            assert ran == Counter()

    asyncio.run(main())


def test_a_named_persons_answer_in_the_question_store_completes_the_task_once(url: str) -> None:  # noqa: F811
    async def main() -> None:
        ran: Counter[str] = Counter()
        async with _two_instances(url, ran) as (ca, cb, qa, qb):
            created = await _start(ca, "delete_repo", {"repo": "acme/old"})
            assert created.status == "working" and created.status_message == "waiting for maintainers to answer"
            ((q, answered),) = [r async for r in qb.list("mcp/to/maintainers/")]
            assert answered is None and q.prompt == "Delete acme/old?" and q.run_id == created.task_id
            assert (
                q.tool is not None and q.tool.name == "delete_repo" and dict(q.tool.arguments) == {"repo": "acme/old"}
            )
            assert (await berth.mcp.get_task(cb, created.task_id)).status == "working"  # not answered yet
            with pytest.raises(MCPError, match="working: it takes no input"):
                await berth.mcp.update_task(cb, created.task_id, YES)  # the chat user cannot answer for them
            await qb.provide(q.key, q.id, "ship it", by="alice", decision="approve")
            polls = await asyncio.gather(*(berth.mcp.get_task(c, created.task_id) for c in (ca, cb, ca, cb)))
            assert {p.status for p in polls} <= {"working", "completed"}
            done = await berth.mcp.get_task(cb, created.task_id)
            assert _said(done) == "approve by alice (acme/old)"
            assert ran == Counter({"acme/old": 1})
            assert [r async for r in qa.list("mcp/to/")] == []  # consumed

    asyncio.run(main())


def test_follows_the_task_in_call_tool_and_leaves_other_clients_alone() -> None:
    async def main() -> None:
        keyring, ran = berth.Keyring.generate(), Counter[str]()
        store, questions = _site("memory://mcp-tasks-follow", keyring)

        async def yes(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
            return ElicitResult(action="accept", content={})

        async with store, questions:
            server = _server(store, questions, ran)
            async with Client(server, extensions=[berth.mcp.TasksClient()], elicitation_callback=yes) as client:
                result = await client.call_tool("deploy", {"env": "dev"})
                assert isinstance(result, CallToolResult) and not result.is_error
            async with Client(server) as plain:  # no tasks extension: the tool's own input round, no task
                first = await plain.session.call_tool("deploy", {"env": "qa"}, allow_input_required=True)
                assert isinstance(first, InputRequiredResult)
                refused = await plain.session.call_tool("delete_repo", {"repo": "x"}, allow_input_required=True)
                assert isinstance(refused, CallToolResult) and refused.is_error
            assert [k async for k in store.list("mcp/tasks/")].__len__() == 1
            assert ran == Counter({"dev": 1})

    asyncio.run(main())
