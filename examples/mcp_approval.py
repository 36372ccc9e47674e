"""An MCP tool waits days for a maintainer's approval, parked sealed in berth; a restarted server completes it once.

    pip install 'berthing[mcp]'
    python examples/mcp_approval.py                     # approve, in a temporary directory
    python examples/mcp_approval.py --answer 'reject: it holds payroll records'

No network: each MCP server is a real process of this script (`--serve`), spoken to over stdio by the
official SDK's client, as an MCP host would.

1. a client calls `delete_repo` on server process A with the Tasks extension; the tool asks the
   `maintainers` group (a berth question with the tool's name and arguments, not the chat user), and
   the call becomes a task, parked sealed in berth (AES-256-GCM, 14-day deadline);
2. process A exits; the maintainer answers with the command line in another process:
   `berth answer KEY approve --question ID`;
3. the client asks a *new* server process B for the task (`tasks/get`): B takes the answer, re-runs
   the tool once and completes the task; asking process C again returns the same result, and the
   tool has run once.

The script exits 1 unless the task completed (or was rejected) once and the tool ran as answered.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from _harness import berth_answer, open_site, run
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, InputRequiredResult, TextContent

import berth
import berth.mcp

RAN = "MCP_EXAMPLE_RAN"  # a file each tool run appends to, across server processes


async def serve() -> None:
    """One server process: its own store handles, the Tasks extension over them, stdio."""
    async with open_site(os.environ["BERTH_URL"], os.environ["BERTH_KEYRING"]) as (store, questions):
        tasks = berth.mcp.Tasks(store, questions=questions)
        server = tasks.bind(MCPServer("ops-server", extensions=[tasks]))

        @server.tool()
        async def delete_repo(repo: str, ctx: Context) -> CallToolResult | InputRequiredResult:
            """Delete a repository, once a maintainer approves."""
            answer = berth.mcp.Tasks.answer(ctx)
            if answer is None:
                return berth.mcp.Tasks.ask_person(
                    "maintainers", f"delete_repo({repo})?", tool="delete_repo", arguments={"repo": repo}
                )
            if answer.decision is not berth.Decision.APPROVE:
                return CallToolResult(content=[TextContent(type="text", text=f"not deleted: {answer.text}")])
            with open(os.environ[RAN], "a") as ran:
                ran.write(repo + "\n")
            return CallToolResult(content=[TextContent(type="text", text=f"deleted {repo} ({answer.by} approved)")])

        await server.run_stdio_async()


def process(name: str) -> Client:
    """A client of a new server process running this script with `--serve`."""
    params = StdioServerParameters(command=sys.executable, args=[__file__, "--serve", name], env=dict(os.environ))
    return Client(params, extensions=[berth.mcp.TasksClient()])


def said(task: berth.mcp.Task) -> str:
    result = task.call_tool_result()
    if result is None:
        return task.status_message or ""
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def main(url: str, keyring: str, answer: str) -> int:
    ran = Path(keyring).with_name("ran.txt")
    ran.touch()
    os.environ[RAN] = str(ran)
    async with process("A") as client:
        created: Any = await client.session.call_tool("delete_repo", {"repo": "acme/old"}, allow_claimed=True)
        print(f"server A: task {created.task_id} is {created.status}: {created.status_message}")
    print("server A: process exited (the task is parked sealed in berth)")
    print(f"human:  {berth_answer(f'mcp/to/maintainers/{created.task_id}', answer, by='alice')}")

    async with process("B") as client:
        done = await berth.mcp.get_task(client, created.task_id)
        print(f"server B: task {done.task_id} is {done.status}: {said(done)}")
    async with process("C") as client:
        again = await berth.mcp.get_task(client, created.task_id)
        print(f"server C: task {again.task_id} is {again.status}: {said(again)}")
    runs = ran.read_text().split()
    approved = answer.strip() == "approve"
    print(f"summary: task {done.status} once; the tool ran {len(runs)} time(s)")
    same = (again.status, said(again)) == (done.status, said(done))
    return 0 if done.status == "completed" and same and runs == (["acme/old"] if approved else []) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve())
    else:
        run(__doc__ or "", main)
