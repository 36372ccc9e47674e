"""A LangGraph graph asks before a risky tool call; berth parks the interrupt; a human answers; one resumer resumes.

    pip install 'berthing[langgraph]'
    python examples/langgraph_approval.py                          # approve, in a temporary directory
    python examples/langgraph_approval.py --answer 'reject: it holds payroll records'

No network: the model is langchain-core's `GenericFakeChatModel`.

1. the model proposes `delete_repo(acme/old)`; the `approve` node calls `interrupt([HumanInterrupt])`
   (LangGraph's Agent Inbox convention); the graph's checkpointer is `berth.langgraph.AsyncBerthSaver`
   (sealed, AES-256-GCM), which parks the interrupt as a berth tool approval (the tool, its arguments,
   approve / reject / edit / respond);
2. a human answers with the command line, in another process: `berth answer KEY approve --question ID`
   (or `--reject REASON`, `--edit JSON`, or the inbox); the answer resumes the graph as a
   `HumanResponse` (`berth.langgraph.human_response`): free text never approves;
3. four resumers, each with its own store handle, race `berth.langgraph.aresume_once`: exactly one
   resumes the graph, and the tool runs once (rejected: never).

The script exits 1 unless exactly one resumer resumed and the tool ran as answered.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, TypedDict

from _harness import IDENTITY, WAKERS, berth_answer, berth_cli, run
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import berth
import berth.aio
import berth.langgraph

deleted: list[str] = []  # what the tool did, in this process
CONFIG: Any = {"configurable": {"thread_id": "ops/ticket-7"}}


class State(TypedDict, total=False):
    repo: str
    outcome: str


def agent(state: State) -> State:
    """The model proposes the risky call (a fake chat model: no network)."""
    call = {"name": "delete_repo", "args": {"repo": "acme/old"}, "id": "call-1"}
    model = GenericFakeChatModel(messages=iter([AIMessage(content="", tool_calls=[call])]))
    message = model.invoke("clean up acme/old")
    return {"repo": message.tool_calls[0]["args"]["repo"]}


def approve(state: State) -> State:
    """Ask before the tool runs, in LangGraph's Agent Inbox convention: berth asks it as a tool approval."""
    request = {
        "action_request": {"action": "delete_repo", "args": {"repo": state["repo"]}},
        "config": {"allow_accept": True, "allow_edit": True, "allow_respond": True, "allow_ignore": False},
        "description": "Delete a repository for good.",
    }
    response = interrupt([request])[0]  # a HumanResponse: berth.langgraph.human_response(answer)
    if response["type"] == "accept":
        repo = state["repo"]
    elif response["type"] == "edit":
        repo = response["args"]["args"]["repo"]  # exactly the arguments the human edited
    else:  # a rejection's reason, or any free text: the tool does not run
        return {"outcome": f"rejected: {response['args']}"}
    deleted.append(repo)
    return {"outcome": f"deleted {repo}"}


def graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=saver)


async def resumer(url: str, keyring: str, answer: dict[str, Any]) -> Any:
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    async with berth.aio.open_store(url, identity=IDENTITY, sealer=sealer) as store:
        return await berth.langgraph.aresume_once(graph(berth.langgraph.AsyncBerthSaver(store)), CONFIG, answer)


async def main(url: str, keyring: str, answer: str) -> int:
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    async with berth.aio.open_store(url, identity=IDENTITY, sealer=sealer) as store:
        paused = await graph(berth.langgraph.AsyncBerthSaver(store)).ainvoke({}, CONFIG)
    print(f"graph:  paused on {len(paused['__interrupt__'])} interrupt(s)")
    (question,) = json.loads(berth_cli("questions", "--json", "--prefix", "langgraph/"))
    print(f"asked:  {question['key']}: {question['prompt']}")
    print(f"human:  {berth_answer(question['key'], answer, by='alice')}")
    questions = berth.open_questions(url, identity=IDENTITY, sealer=sealer)
    given = questions.answer(question["key"])
    assert given is not None
    outcomes: dict[str, Any] = {}
    barrier = threading.Barrier(WAKERS)

    def race(name: str) -> None:
        barrier.wait()
        response = berth.langgraph.human_response(given, question["tool"]["name"])
        outcomes[name] = asyncio.run(resumer(url, keyring, {given.question_id: [response]}))

    threads = [threading.Thread(target=race, args=(f"resumer-{i}",)) for i in range(1, WAKERS + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, out in sorted(outcomes.items()):
        print(f"resumer: {name}: {out['outcome'] if out else 'None (another resumer had it)'}")
    resumed = [out for out in outcomes.values() if out is not None]
    expected = ["acme/old"] if berth.langgraph.parse_approval(answer)[0] else []
    print(f"summary: {len(resumed)} resume of {WAKERS} resumers; the tool ran {len(deleted)} time(s)")
    return 0 if len(resumed) == 1 and deleted == expected else 1


if __name__ == "__main__":
    run(__doc__ or "", main)
