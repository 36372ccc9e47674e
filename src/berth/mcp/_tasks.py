"""`Tasks`: the MCP Tasks extension (`io.modelcontextprotocol/tasks`) with berth as its store.

A task is one sealed frame under `mcp/tasks/<task id>` holding the call (tool, arguments), its
status, the input it waits on (the client's `inputRequests` and the tool's request state, or the
key of a berth question a named person answers), the principal that created it, and its result.
Every transition is a compare-and-set on that frame (`save(if_match=token)`): two instances that
race to resume a task cannot both win, and the loser is told. The frame's deadline is the task's:
past it the task reads `failed` (expired) and is never resumed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import authenticated_principal
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    InputRequiredResult,
    TextContent,
)

from berth._aio_questions import AsyncQuestionStore
from berth._aio_store import AsyncStore
from berth._envelope import Envelope
from berth._errors import Expired, TokenMismatch
from berth._question_types import Answer, Decision, ToolRequest
from berth.mcp._rounds import PROVIDER
from berth.mcp._wire import TASKS_EXTENSION, TERMINAL, CreateTaskResult, Task, TaskParams, UpdateTaskParams

__all__ = ["TASKS_EXTENSION", "Tasks"]

_TASKS = "mcp/tasks/"
_ASKED = "mcp/to/"  # questions to a named person or group: mcp/to/<approver>/<task id>
_PERSON = "berth.mcp.person:"  # the request state of `ask_person`'s result: the question to ask
_ANSWERED = "berth.mcp.answered:"  # the request state a resumed person task sees: the answer and the tool's state

Principal = Callable[[ServerRequestContext[Any, Any]], str | None]


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class Tasks(Extension):
    """The Tasks extension for an `MCPServer`, its tasks parked sealed in a store every instance shares.

        tasks = berth.mcp.Tasks(store, questions=questions)
        server = tasks.bind(MCPServer("ops", extensions=[tasks]))

    A `tools/call` from a client that advertises the extension, whose tool answers
    `InputRequiredResult`, becomes a task: `input_required` with the tool's input requests (the
    chat user answers them with `tasks/update`), or, for `ask_person`, `working` while a named
    person or group answers a berth question (`berth questions`, the inbox, `berth answer`). The
    answer re-runs the tool (its round two: `ctx.input_responses` and `ctx.request_state` set, or
    `Tasks.answer(ctx)` for a person's answer) exactly once, on whichever instance receives the
    `tasks/update` or, for a person's answer, the next `tasks/get`. A client without the extension
    gets the tool's `InputRequiredResult` unchanged.
    """

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        store: AsyncStore,
        *,
        questions: AsyncQuestionStore | None = None,
        lifetime: timedelta = timedelta(days=14),
        principal: Principal = authenticated_principal,
        poll_interval: timedelta = timedelta(seconds=2),
    ):
        """Tasks parked in `store` under `mcp/tasks/`, each answerable for `lifetime` after it was created.

        Args:
            store: where tasks are parked (sealed by its sealer); share it between server instances.
            questions: the question store people answer in (`berth questions`, the inbox); needed
                for `ask_person`.
            lifetime: the task's deadline after creation; past it the task fails and never resumes.
            principal: who is asking, from the request (default: the SDK's authenticated principal,
                None on unauthenticated transports); a task answers only the principal that created it.
            poll_interval: the `pollIntervalMs` hint given to clients.

        Raises:
            TypeError: `store` is not a `berth.aio.AsyncStore`, or `questions` not an `AsyncQuestionStore`.
            ValueError: `lifetime` or `poll_interval` is not positive.
        """
        if not isinstance(store, AsyncStore):
            raise TypeError(f"Tasks needs a berth.aio.AsyncStore (berth.aio.open_store), not {type(store).__name__}")
        if questions is not None and not isinstance(questions, AsyncQuestionStore):
            raise TypeError(f"Tasks: questions must be a berth.aio.AsyncQuestionStore, not {type(questions).__name__}")
        if lifetime <= timedelta(0) or poll_interval <= timedelta(0):
            raise ValueError(f"Tasks: lifetime and poll_interval must be positive, got {lifetime} and {poll_interval}")
        self._store = store
        self._questions = questions
        self._lifetime = lifetime
        self._principal = principal
        self._poll_ms = int(poll_interval.total_seconds() * 1000)
        self._server: MCPServer | None = None

    def bind(self, server: MCPServer) -> MCPServer:
        """Let the tasks re-run `server`'s tools when answered (the SDK hands an extension no server); `server`."""
        self._server = server
        return server

    @property
    def store(self) -> AsyncStore:
        """The store tasks are parked in."""
        return self._store

    # -- what a tool calls ---------------------------------------------------------------------

    @staticmethod
    def ask_person(
        approver: str,
        prompt: str,
        *,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        state: str = "",
        accepts: Iterable[Decision | str] = (Decision.APPROVE, Decision.REJECT),
    ) -> InputRequiredResult:
        """What a tool returns to have a named person or group, not the chat user, decide (round one).

        The call becomes a task (`working`) and a berth question under `mcp/to/<approver>/<task id>`
        with the tool's name and arguments; the answer given there (`berth answer`, the inbox,
        `berth mcp`) re-runs the tool once, where `Tasks.answer(ctx)` returns it.

        Args:
            approver: the person or group asked (one key segment: `maintainers`, `alice`).
            prompt: the question shown.
            tool: the name of the call the approval is about, shown with the question.
            arguments: its arguments, shown with the question.
            state: the tool's own state for the re-run (`Tasks.state(ctx)`).
            accepts: the decisions an answer may make.
        """
        if not approver or "/" in approver:
            raise ValueError(f"ask_person: approver must be one non-empty key segment, got {approver!r}")
        asked = {
            "to": approver,
            "prompt": prompt,
            "tool": tool,
            "arguments": dict(arguments or {}),
            "state": state,
            "accepts": [str(Decision(a)) for a in accepts],
        }
        return InputRequiredResult(request_state=_PERSON + json.dumps(asked, separators=(",", ":")))

    @staticmethod
    def answer(ctx: Context[Any, Any]) -> Answer | None:
        """The person's answer when the tool is re-run after `ask_person`; None on any other round."""
        resumed = _answered(ctx.request_state)
        return None if resumed is None else resumed[0]

    @staticmethod
    def state(ctx: Context[Any, Any]) -> str:
        """The `state` given to `ask_person`, when the tool is re-run with the person's answer ("" otherwise)."""
        resumed = _answered(ctx.request_state)
        return "" if resumed is None else resumed[1]

    # -- the extension -------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {}

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/update", UpdateTaskParams, self._update),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if (params.request_state or "").startswith(_ANSWERED):  # only a task's re-run carries it, never a client
            return _error("this request state is not the client's to send")
        result = await call_next(ctx)
        if not isinstance(result, InputRequiredResult):
            return result
        person = (result.request_state or "").startswith(_PERSON)
        if not _client_has_tasks(ctx):
            if person:
                return _error(f"tool {params.name!r} waits on a person's approval: call it with the tasks extension")
            return result
        task_id = secrets.token_urlsafe(16)
        now = self._store.now()
        state: dict[str, Any] = {
            "tool": params.name,
            "arguments": dict(params.arguments or {}),
            "principal": self._principal(ctx),
            "created": _iso(now),
        }
        self._waiting(state, task_id, result, now)
        if person:
            await self._ask(task_id, state, now + self._lifetime)
        envelope = self._envelope(task_id, state, now + self._lifetime)
        await self._store.save(_TASKS + task_id, envelope, if_absent=True)
        task = self._task(task_id, state, envelope.deadline)
        return CreateTaskResult.model_validate(task.model_dump(exclude={"result_type", "input_requests"}))

    # -- tasks/get, tasks/update, tasks/cancel -------------------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> Task:
        task_id, state, token, deadline = await self._load(ctx, params.task_id)
        if state["status"] == "working" and state.get("question") and not self._expired(deadline):
            state, deadline = await self._resume_person(ctx, task_id, state, token, deadline)
        return self._task(task_id, state, deadline)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> EmptyResult:
        task_id, state, token, deadline = await self._load(ctx, params.task_id)
        if self._expired(deadline):
            raise MCPError(INVALID_PARAMS, f"task {task_id} expired at {_iso(deadline)}: it never resumes")
        if state["status"] != "input_required":
            raise MCPError(INVALID_PARAMS, f"task {task_id} is {state['status']}: it takes no input now")
        unknown = set(params.input_responses) - set(state.get("input_requests") or {})
        if unknown:
            raise MCPError(INVALID_PARAMS, f"task {task_id} asked for none of {sorted(unknown)}")
        running = {**state, "status": "working", "message": "resuming with the client's input"}
        token = await self._move(task_id, running, token, deadline, lost="another update of it was taken first")
        request_state = state.get("request_state")
        await self._run(ctx, task_id, running, token, deadline, params.input_responses, request_state)
        return EmptyResult()

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> Task:
        task_id, state, token, deadline = await self._load(ctx, params.task_id)
        if state["status"] in TERMINAL or self._expired(deadline):
            return self._task(task_id, state, deadline)
        cancelled = {**state, "status": "cancelled", "message": "cancelled by the client", "updated": self._now()}
        await self._move(task_id, cancelled, token, deadline, lost="it changed meanwhile: read it again")
        await self._drop_question(state)
        return self._task(task_id, cancelled, deadline)

    # -- transitions ---------------------------------------------------------------------------

    async def _resume_person(
        self, ctx: ServerRequestContext[Any, Any], task_id: str, state: dict[str, Any], token: Any, deadline: datetime
    ) -> tuple[dict[str, Any], datetime]:
        questions = self._need_questions()
        key, question_id = state["question"]["key"], state["question"]["id"]
        record = await questions.record(key)
        if record is None or record[0].id != question_id or record[1] is None:
            return state, deadline  # not answered yet (or the question went away: the deadline ends the task)
        answer = record[1]
        running = {**state, "status": "working", "message": f"resuming: {answer.by} answered", "question": None}
        try:
            token = await self._move(task_id, running, token, deadline, lost="")
        except MCPError:  # another instance resumes it: report what is parked now
            _, now_state, _, deadline = await self._load(ctx, task_id)
            return now_state, deadline
        await questions.consume(key, question_id)
        resumed = _ANSWERED + json.dumps(
            {"answer": _answer_doc(answer), "state": state["question"].get("state", "")}, separators=(",", ":")
        )
        return await self._run(ctx, task_id, running, token, deadline, None, resumed), deadline

    async def _run(
        self,
        ctx: ServerRequestContext[Any, Any],
        task_id: str,
        state: dict[str, Any],
        token: Any,
        deadline: datetime,
        input_responses: Any,
        request_state: str | None,
    ) -> dict[str, Any]:
        """Re-run the tool (this instance won the task's compare-and-set) and park what it answered."""
        server = self._server
        if server is None:
            raise RuntimeError("berth.mcp.Tasks is not bound to its server: call tasks.bind(server)")
        params = CallToolRequestParams(
            name=state["tool"],
            arguments=state["arguments"],
            input_responses=input_responses,
            request_state=request_state,
        )
        context = Context(request_context=ctx, mcp_server=server, input_params=params)
        try:
            result: CallToolResult | InputRequiredResult = await server.call_tool(
                params.name, dict(state["arguments"]), context
            )
        except ToolError as exc:
            result = _error(str(exc))
        except MCPError as exc:
            result = _error(exc.error.message)
        now = self._store.now()
        done: dict[str, Any] = {**state, "updated": _iso(now), "message": None}
        if isinstance(result, InputRequiredResult):
            self._waiting(done, task_id, result, now)
            if (result.request_state or "").startswith(_PERSON):
                await self._ask(task_id, done, deadline)
        elif result.is_error:
            done.update(status="failed", error={"code": -32603, "message": _text(result)}, result=None)
        else:
            done.update(status="completed", result=result.model_dump(mode="json", by_alias=True, exclude_none=True))
        try:
            await self._move(task_id, done, token, deadline, lost="")
        except MCPError:  # cancelled while the tool ran: the cancellation stands
            return (await self._load(ctx, task_id))[1]
        return done

    def _waiting(self, state: dict[str, Any], task_id: str, result: InputRequiredResult, now: datetime) -> None:
        """Set `state` to wait on what `result` asks: the client's input, or a person's answer."""
        state["updated"] = _iso(now)
        if (result.request_state or "").startswith(_PERSON):
            asked = json.loads(result.request_state[len(_PERSON) :])  # type: ignore[index]
            state.update(
                status="working",
                message=f"waiting for {asked['to']} to answer",
                input_requests=None,
                request_state=None,
                question={"key": f"{_ASKED}{asked['to']}/{task_id}", "asked": asked, "state": asked["state"]},
            )
            return
        state.update(
            status="input_required",
            message=None,
            input_requests={
                k: v.model_dump(mode="json", by_alias=True, exclude_none=True)
                for k, v in (result.input_requests or {}).items()
            },
            request_state=result.request_state,
            question=None,
        )

    async def _ask(self, task_id: str, state: dict[str, Any], deadline: datetime | None) -> None:
        questions = self._need_questions()
        q = state["question"]
        asked = q["asked"]
        tool = ToolRequest(name=asked["tool"], arguments=asked["arguments"], agent=self._agent(), call_id=task_id)
        question = await questions.ask(
            q["key"], asked["prompt"], run_id=task_id, deadline=deadline, accepts=asked["accepts"], tool=tool
        )
        q["id"] = question.id

    async def _drop_question(self, state: dict[str, Any]) -> None:
        q = state.get("question")
        if q and q.get("id") and self._questions is not None:
            await self._questions.consume(q["key"], q["id"])

    # -- the parked frame ----------------------------------------------------------------------

    async def _load(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> tuple[str, dict[str, Any], Any, datetime]:
        if not isinstance(task_id, str) or len(task_id) != 22 or not all(c.isalnum() or c in "-_" for c in task_id):
            raise MCPError(INVALID_PARAMS, "unknown task")
        parked = await self._store.load(_TASKS + task_id, allow_expired=True)  # expiry is reported, never resumed
        if parked is None:
            raise MCPError(INVALID_PARAMS, "unknown task")
        state = json.loads(parked.envelope.provider_state)
        if state.get("principal") != self._principal(ctx):
            raise MCPError(INVALID_PARAMS, "unknown task")  # another principal's task is not theirs to see
        deadline = parked.envelope.deadline
        assert deadline is not None  # every task is parked with one
        return task_id, state, parked.token, deadline

    async def _move(self, task_id: str, state: dict[str, Any], token: Any, deadline: datetime, *, lost: str) -> Any:
        """Compare-and-set the task to `state`; the new token. MCPError when another transition came first."""
        try:
            await self._store.save(_TASKS + task_id, self._envelope(task_id, state, deadline), if_match=token)
        except (TokenMismatch, Expired):
            raise MCPError(INVALID_PARAMS, f"task {task_id}: {lost or 'it changed meanwhile'}") from None
        parked = await self._store.load(_TASKS + task_id, allow_expired=True)
        return None if parked is None else parked.token

    def _envelope(self, task_id: str, state: dict[str, Any], deadline: datetime | None) -> Envelope:
        return Envelope(
            provider_state=state,
            provider=PROVIDER,
            run_id=task_id,
            reason=state["status"],
            deadline=deadline,
            labels={"mcp.tool": state["tool"], "mcp.status": state["status"]},
        )

    def _task(self, task_id: str, state: dict[str, Any], deadline: datetime | None) -> Task:
        status, message = state["status"], state.get("message")
        error = state.get("error")
        if deadline is not None and self._expired(deadline) and status not in TERMINAL:
            status, message = "failed", f"expired at {_iso(deadline)}: never resumed"
            error = {"code": -32603, "message": message}
        created = datetime.fromisoformat(state["created"])
        return Task(
            task_id=task_id,
            status=status,
            status_message=message,
            created_at=state["created"],
            last_updated_at=state.get("updated", state["created"]),
            ttl_ms=None if deadline is None else int((deadline - created).total_seconds() * 1000),
            poll_interval_ms=self._poll_ms,
            input_requests=state.get("input_requests") if status == "input_required" else None,
            result=state.get("result") if status == "completed" else None,
            error=error if status == "failed" else None,
        )

    def _expired(self, deadline: datetime) -> bool:
        return self._store.now() > deadline

    def _now(self) -> str:
        return _iso(self._store.now())

    def _agent(self) -> str:
        return "" if self._server is None else self._server.name

    def _need_questions(self) -> AsyncQuestionStore:
        if self._questions is None:
            raise RuntimeError("berth.mcp.Tasks needs questions= (a berth.aio.AsyncQuestionStore) for ask_person")
        return self._questions


def _client_has_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and TASKS_EXTENSION in extensions  # type: ignore[operator]


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent)) or "the tool failed"


def _answer_doc(answer: Answer) -> dict[str, Any]:
    return {
        "question_id": answer.question_id,
        "text": answer.text,
        "by": answer.by,
        "answered_at": answer.answered_at.isoformat(),
        "decision": answer.decision.value,
        "arguments": None if answer.arguments is None else dict(answer.arguments),
    }


def _answered(request_state: str | None) -> tuple[Answer, str] | None:
    if not request_state or not request_state.startswith(_ANSWERED):
        return None
    doc = json.loads(request_state[len(_ANSWERED) :])
    a = doc["answer"]
    answer = Answer(
        question_id=a["question_id"],
        text=a["text"],
        by=a["by"],
        answered_at=datetime.fromisoformat(a["answered_at"]),
        decision=Decision(a["decision"]),
        arguments=a["arguments"],
    )
    return answer, doc["state"]
