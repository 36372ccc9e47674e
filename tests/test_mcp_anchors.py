"""The anchors docs/integrations/mcp.md compares berth.mcp with, measured: what the official SDK does alone.

Each assertion is one cell of the comparison table: the SDK's default request-state lifetime, that its
default (in-process) key does not survive a server restart, and that a duplicated round-two retry runs
the tool again.
"""

from __future__ import annotations

import asyncio
from collections import Counter

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
