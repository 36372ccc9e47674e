"""MCP servers on the official SDK: request state sealed under the host's keys, rounds completed once (extra `mcp`).

    codec = berth.mcp.request_state_codec(berth.AesGcmSealer(keyring), audience="deploy-server")
    server = MCPServer("deploy-server", request_state_security=RequestStateSecurity(codec=codec))
    rounds = berth.mcp.Rounds(async_store)

    @server.tool()
    async def deploy(env: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        if ctx.request_state is None:                   # round one: ask, park the round
            return await rounds.ask({"ok": ElicitRequest(...)})
        return await rounds.finish(ctx.request_state, lambda state: really_deploy(env, ctx.input_responses))

`request_state_codec(sealer)` is the SDK's `RequestStateCodec` over a berth
sealer: an AES-GCM keyring (old tokens open after a rotation) or a KMS sealer
(one data key wrapped per `data_key_ttl`, unwrapped keys cached, so no KMS call
per token). The SDK's boundary binds each token to the method, tool, arguments,
principal and audience inside the sealed payload and checks its expiry; the
codec binds the seal itself to `audience`, so a token sealed by another server
under the same keys fails to open. Every failure to open is the SDK's
`InvalidRequestState`.

`Rounds(store)` makes the second round of an input-required tool call (the
retry that carries the answers) run its continuation exactly once across every
server instance sharing `store`: round one parks an open marker under a fresh
round id (carried in the sealed request state); round two claims it (the
store's claim is the commit point), runs the continuation, and stores its
result sealed (first writer wins) until the round's deadline; a replayed or
duplicated retry, on any instance, gets that stored result back. Past the
deadline the round is refused.

`Tasks(store)` is the Tasks extension (`io.modelcontextprotocol/tasks`) with
berth as its store: a tool call that needs input becomes a task parked sealed in
berth, bound to its task id and principal, with a deadline (14 days by
default); `tasks/get`, `tasks/update` and `tasks/cancel` work on every server
instance sharing the store, and the answer resumes the task exactly once. A tool
may ask a named person or group instead of the chat user (`Tasks.ask_person`):
the question shows in `berth questions` and the inbox, and the answer given there
completes the task. `TasksClient` is the client side. See
docs/integrations/mcp.md.
"""

from __future__ import annotations

try:
    import mcp.server.extension  # noqa: F401
    import mcp_types  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.mcp needs the official MCP Python SDK: pip install 'berthing[mcp]'") from exc

from berth.mcp._codec import request_state_codec
from berth.mcp._rounds import PROVIDER, Rounds
from berth.mcp._tasks import TASKS_EXTENSION, Tasks
from berth.mcp._wire import Task, TasksClient, cancel_task, get_task, update_task

__all__ = [
    "PROVIDER",
    "TASKS_EXTENSION",
    "Rounds",
    "Task",
    "Tasks",
    "TasksClient",
    "cancel_task",
    "get_task",
    "request_state_codec",
    "update_task",
]
