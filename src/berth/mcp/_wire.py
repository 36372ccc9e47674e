"""The Tasks extension's wire shapes (`io.modelcontextprotocol/tasks`, SEP-2663) and its client side.

The SDK (mcp 2.3.0) reserves the `task` result type and the `Mcp-Name` header for `tasks/*` but ships
no models for them; these are the shapes berth serves and reads: a `tools/call` answered with
`{"resultType": "task", "taskId", "status", ...}`, `tasks/get` answering the task (with `inputRequests`
while `input_required`, `result` once `completed`, `error` once `failed`), `tasks/update` delivering
`inputResponses`, `tasks/cancel`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    EmptyResult,
    ErrorData,
    InputRequests,
    InputResponse,
    InputResponses,
    Request,
    RequestParams,
    Result,
    TextContent,
)

__all__ = [
    "TASKS_EXTENSION",
    "TERMINAL",
    "CreateTaskResult",
    "Task",
    "TaskParams",
    "TasksClient",
    "UpdateTaskParams",
    "cancel_task",
    "get_task",
    "update_task",
]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension's identifier, advertised in capabilities."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class _TaskFields(Result):
    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreateTaskResult(_TaskFields):
    """What `tools/call` answers when the call became a task (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"


class Task(_TaskFields):
    """A task as `tasks/get` and `tasks/cancel` answer it."""

    result_type: str | None = None
    input_requests: InputRequests | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        """Whether the task is completed, failed or cancelled (it never changes again)."""
        return self.status in TERMINAL

    def call_tool_result(self) -> CallToolResult | None:
        """The tool's result once completed (an error result once failed); None before."""
        if self.status == "completed" and self.result is not None:
            return CallToolResult.model_validate(self.result)
        if self.status in ("failed", "cancelled"):
            why = (self.error or {}).get("message") or self.status_message or self.status
            return CallToolResult(content=[TextContent(type="text", text=str(why))], is_error=True)
        return None


class TaskParams(RequestParams):
    """`tasks/get` and `tasks/cancel` params."""

    task_id: str


class UpdateTaskParams(TaskParams):
    """`tasks/update` params: responses to the task's outstanding `inputRequests`."""

    input_responses: InputResponses


class _GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class _UpdateTask(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class _CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


def _session(client: Any) -> Any:
    return getattr(client, "session", client)  # an mcp.Client or its ClientSession


async def get_task(client: Any, task_id: str) -> Task:
    """`tasks/get` through an `mcp.Client` (or its `ClientSession`): the task as the server has it now."""
    task: Task = await _session(client).send_request(_GetTask(params=TaskParams(task_id=task_id)), Task)
    return task


async def update_task(client: Any, task_id: str, input_responses: Mapping[str, InputResponse]) -> None:
    """`tasks/update`: deliver responses to the task's outstanding `inputRequests`; read the outcome with `get_task`."""
    params = UpdateTaskParams(task_id=task_id, input_responses=dict(input_responses))
    await _session(client).send_request(_UpdateTask(params=params), EmptyResult)


async def cancel_task(client: Any, task_id: str) -> Task:
    """`tasks/cancel`: the task becomes `cancelled` (terminal) unless it already was terminal; the task after."""
    task: Task = await _session(client).send_request(_CancelTask(params=TaskParams(task_id=task_id)), Task)
    return task


async def _answer(session: Any, requests: InputRequests) -> InputResponses:
    """Each input request through the client's own handlers, as the SDK's input-required driver does."""
    responses: InputResponses = {}
    for key, request in requests.items():
        meta = request.params.meta if request.params else None
        got = await session.dispatch_input_request(
            ClientRequestContext(session=session, request_id=key, meta=meta), request
        )
        if isinstance(got, ErrorData):
            raise MCPError(code=got.code, message=got.message, data=got.data)
        responses[key] = got
    return responses


class TasksClient(ClientExtension):
    """The client side: advertises the extension and, in `Client.call_tool`, follows a task to its result.

    `Client(server, extensions=[TasksClient()])`: a call that becomes a task is polled with `tasks/get`
    (at the server's `pollIntervalMs`, at most `max_poll` seconds apart); input the task asks the client
    for goes to the client's own handlers (elicitation, sampling) and back with `tasks/update`. To keep
    the task handle instead (to poll it later, from another process), call
    `client.session.call_tool(..., allow_claimed=True)`: it returns the `CreateTaskResult`.
    """

    identifier = TASKS_EXTENSION

    def __init__(self, *, max_poll: float = 5.0) -> None:
        self._max_poll = max_poll

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._follow),)

    async def _follow(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        pause = (created.poll_interval_ms or 1000) / 1000
        while True:
            task = await get_task(ctx.session, created.task_id)
            done = task.call_tool_result()
            if done is not None:
                return done
            if task.status == "input_required" and task.input_requests:
                await update_task(ctx.session, created.task_id, await _answer(ctx.session, task.input_requests))
                continue
            await asyncio.sleep(min(pause, self._max_poll))
