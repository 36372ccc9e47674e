"""An A2A agent asks a maintainer before a risky call; the task waits sealed in berth; a new server completes it once.

    pip install 'berthing[a2a]'
    python examples/a2a_approval.py                     # approve, in a temporary directory
    python examples/a2a_approval.py --answer 'reject: it holds payroll records'

No network: the A2A server is a2a-sdk's `DefaultRequestHandler`, called in process as its HTTP or gRPC
transport would call it.

1. a client asks server instance A to delete `acme/old`; the agent asks a maintainer (a berth tool
   approval question) and moves the task to `input-required`; the task is parked sealed in berth by
   `berth.a2a.BerthTaskStore` (AES-256-GCM, bound to the client as its owner, 14-day deadline);
2. instance A goes away; the maintainer answers with the command line in another process:
   `berth answer KEY approve --question ID` (free text never approves);
3. the client sends its follow-up to a *new* instance B over the same store: B reads the task from
   berth, takes the answer (consumed once) and completes the task; a duplicate follow-up to a third
   instance C is refused (the task is terminal) and the tool has run once.

The script exits 1 unless the task completed (or was rejected) once and the tool ran as answered.
"""

from __future__ import annotations

import uuid
from typing import Any

from _harness import berth_answer, open_site, run
from a2a.auth.user import User
from a2a.helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)

import berth
import berth.a2a
import berth.aio

ran: list[str] = []  # what the tool did, in this process
CARD = AgentCard(
    name="ops-agent",
    description="Deletes repositories, with a maintainer's approval",
    version="1.0.0",
    supported_interfaces=[
        AgentInterface(url="http://127.0.0.1:9/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
    ],
    capabilities=AgentCapabilities(streaming=False),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[AgentSkill(id="delete_repo", name="delete a repository", description="after approval", tags=["ops"])],
)


class Client(User):
    """The A2A client as the server's authentication saw it: the owner of its tasks."""

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return "carol"


def question_key(task_id: str) -> str:
    return f"a2a/approvals/{task_id}"


class OpsAgent(AgentExecutor):
    """Asks before `delete_repo`; on the follow-up, acts on the maintainer's recorded decision."""

    def __init__(self, questions: berth.aio.AsyncQuestionStore) -> None:
        self.questions = questions

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        key = question_key(context.task_id)
        if context.current_task is None:  # a new request: ask the maintainer, then wait for input
            first = [context.message] if context.message else []
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=first)
            )
            tool = berth.ToolRequest(name="delete_repo", arguments={"repo": "acme/old"}, agent="ops-agent")
            await self.questions.ask(key, "delete_repo(acme/old)?", accepts=["approve", "reject"], tool=tool)
            await updater.requires_input(updater.new_agent_message([Part(text="waiting for a maintainer")]))
            return
        answer = await self.questions.answer(key)
        if answer is None:
            await updater.requires_input(updater.new_agent_message([Part(text="still waiting for a maintainer")]))
            return
        if not await self.questions.consume(key, answer.question_id):  # another instance took it first
            return
        if answer.decision is berth.Decision.APPROVE:
            ran.append("acme/old")
            await updater.complete(updater.new_agent_message([Part(text=f"deleted acme/old ({answer.by} approved)")]))
        else:
            await updater.reject(updater.new_agent_message([Part(text=f"not deleted: {answer.text}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


async def send(handler: DefaultRequestHandler, text: str, task: Task | None = None) -> Task:
    """What the client's A2A transport does: one `SendMessage` (a follow-up names the task and its context)."""
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    got = await handler.on_message_send(SendMessageRequest(message=message), ServerCallContext(user=Client()))
    assert isinstance(got, Task)
    return got


async def instance(name: str, url: str, keyring: str, body: Any) -> Any:
    """A server instance: its own store handles and its own request handler over `BerthTaskStore`."""
    async with open_site(url, keyring) as (store, questions):
        handler = DefaultRequestHandler(OpsAgent(questions), berth.a2a.BerthTaskStore(store), CARD)
        try:
            return await body(handler)
        finally:
            await handler.aclose()


def said(task: Task) -> str:
    return " ".join(p.text for p in task.status.message.parts)


async def main(url: str, keyring: str, answer: str) -> int:
    task = await instance("A", url, keyring, lambda h: send(h, "please delete acme/old"))
    print(f"server A: task {task.id} is {TaskState.Name(task.status.state)}: {said(task)}")
    print("server A: gone (its process would exit here; the task is parked sealed in berth)")
    print(f"human:  {berth_answer(question_key(task.id), answer, by='alice')}")

    done = await instance("B", url, keyring, lambda h: send(h, "any news?", task))
    print(f"server B: task {done.id} is {TaskState.Name(done.status.state)}: {said(done)}")
    try:
        again = await instance("C", url, keyring, lambda h: send(h, "any news?", task))
        print(f"server C: task is {TaskState.Name(again.status.state)} (a second completion)")
        twice = True
    except Exception as exc:  # the SDK refuses a message to a terminal task
        print(f"server C: refused: {type(exc).__name__}")
        twice = False
    approved = answer.strip() == "approve"
    want = TaskState.TASK_STATE_COMPLETED if approved else TaskState.TASK_STATE_REJECTED
    print(f"summary: task {TaskState.Name(done.status.state)} once; the tool ran {len(ran)} time(s)")
    return 0 if done.status.state == want and not twice and ran == (["acme/old"] if approved else []) else 1


if __name__ == "__main__":
    run(__doc__ or "", main)
