"""The anchors docs/integrations/mcp.md compares berth.mcp with, measured: what the official SDK does alone.

Each assertion is one cell of the comparison table: the SDK's default request-state lifetime, that its
default (in-process) key does not survive a server restart, and that a duplicated round-two retry runs
the tool again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install -e '.[mcp]'")

from mcp import Client  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.request_state import RequestStateSecurity  # noqa: E402
from mcp_types import (  # noqa: E402
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponse,
    TextContent,
)

ASK = ElicitRequest(
    params=ElicitRequestFormParams(message="deploy?", requested_schema={"type": "object", "properties": {}})
)


def _sdk_server(ran: Counter[str]) -> MCPServer:
    server = MCPServer("deployer")  # the SDK's default: RequestStateSecurity.ephemeral()

    @server.tool()
    async def deploy(env: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        if ctx.request_state is None:
            return InputRequiredResult(input_requests={"ok": ASK}, request_state=env)
        ran[env] += 1
        return CallToolResult(content=[TextContent(type="text", text=f"deployed {env}")])

    return server


def test_the_sdks_request_state_lives_ten_minutes_by_default() -> None:
    assert RequestStateSecurity.ephemeral().ttl == 600.0


def test_the_sdk_alone_runs_a_duplicated_retry_twice_and_forgets_a_round_across_a_restart() -> None:
    async def main() -> None:
        ran: Counter[str] = Counter()
        yes: dict[str, InputResponse] = {"ok": ElicitResult(action="accept", content={})}
        async with Client(_sdk_server(ran)) as client, Client(_sdk_server(ran)) as restarted:
            first = await client.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult) and first.request_state
            for _ in range(2):  # the same retry, sent twice (a client retrying after a timeout)
                again = await client.session.call_tool(
                    "deploy", {"env": "prod"}, input_responses=yes, request_state=first.request_state
                )
                assert isinstance(again, CallToolResult) and not again.is_error
            assert ran["prod"] == 2  # executed twice: the codec is stateless
            with pytest.raises(Exception, match="requestState"):  # a new process: another in-memory key
                await restarted.session.call_tool(
                    "deploy", {"env": "prod"}, input_responses=yes, request_state=first.request_state
                )
            assert ran["prod"] == 2

    asyncio.run(main())


# --- a2a-sdk's own InMemoryTaskStore (the table's "a2a-sdk 1.3.0 stores" column) ---------------------
# The DatabaseTaskStore needs sqlalchemy + aiosqlite, which the test extra does not install: it is
# measured by benchmarks/anchors_a2a_database.py in a scratch venv.


def _a2a() -> Any:
    return pytest.importorskip("a2a.server.tasks", reason="the a2a extra is not installed")


def _a2a_task(state_name: str) -> Any:
    from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus

    return Task(id="t-1", context_id="c-1", status=TaskStatus(state=getattr(TaskState, state_name)))


def _a2a_ctx() -> Any:
    from a2a.server.context import ServerCallContext

    return ServerCallContext()


def _a2a_note(text: str) -> Any:
    from a2a.types.a2a_pb2 import Message, Part, Role

    return Message(message_id=text, role=Role.ROLE_USER, parts=[Part(text=text)])


def test_a2a_in_memory_store_loses_a_concurrent_update_silently() -> None:
    store = _a2a().InMemoryTaskStore()

    async def main() -> list[str]:
        await store.save(_a2a_task("TASK_STATE_WORKING"), _a2a_ctx())
        a, b = await asyncio.gather(store.get("t-1", _a2a_ctx()), store.get("t-1", _a2a_ctx()))
        a.history.append(_a2a_note("from worker A"))
        b.history.append(_a2a_note("from worker B"))
        await asyncio.gather(store.save(a, _a2a_ctx()), store.save(b, _a2a_ctx()))  # neither is refused
        final = await store.get("t-1", _a2a_ctx())
        return [part.text for message in final.history for part in message.parts]

    assert asyncio.run(main()) == ["from worker B"]  # last writer wins: A's update is gone, nobody told


def test_a2a_in_memory_store_has_no_deadline_for_an_input_required_task(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect
    import time

    tasks = _a2a()
    assert list(inspect.signature(tasks.InMemoryTaskStore.save).parameters) == ["self", "task", "context"]
    store = tasks.InMemoryTaskStore()
    waiting = _a2a_task("TASK_STATE_INPUT_REQUIRED")
    asyncio.run(store.save(waiting, _a2a_ctx()))
    later = time.time() + 400 * 86400  # the wall clock 400 days on: nothing in the store reads it
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert asyncio.run(store.get("t-1", _a2a_ctx())) == waiting


def test_a2a_in_memory_store_forgets_a_task_across_a_restart() -> None:
    tasks = _a2a()
    asyncio.run(tasks.InMemoryTaskStore().save(_a2a_task("TASK_STATE_INPUT_REQUIRED"), _a2a_ctx()))
    assert asyncio.run(tasks.InMemoryTaskStore().get("t-1", _a2a_ctx())) is None  # a new process's store
