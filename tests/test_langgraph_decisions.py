"""berth.langgraph: an interrupt in LangGraph's Agent Inbox convention is a structured tool approval.

The graph asks `interrupt([HumanInterrupt])` before a tool call (offline: langchain-core's fake chat
model proposes the call); the saver parks the interrupt as a berth question that names the tool and
what an answer may decide; the answer, as a `HumanResponse` (`berth.langgraph.human_response`),
resumes the graph through `resume_once`, and the tool runs with exactly what was approved or edited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest

import berth
from tests.conftest import require

require("langgraph", "LangGraph")

from berth.langgraph import BerthSaver, human_response, resume_once  # noqa: E402

IDENTITY = "ops"
CONFIG: Any = {"configurable": {"thread_id": "ticket-7"}}
D = berth.Decision


class State(TypedDict, total=False):
    args: dict[str, Any]
    outcome: str


def graph(saver: Any, ran: list[Any], *, allow_edit: bool = True) -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def agent(state: State) -> State:
        call = {"name": "delete_repo", "args": {"repo": "acme/old"}, "id": "call-1"}
        message = GenericFakeChatModel(messages=iter([AIMessage(content="", tool_calls=[call])])).invoke("go")
        return {"args": message.tool_calls[0]["args"]}

    def review(state: State) -> State:
        request = {
            "action_request": {"action": "delete_repo", "args": state["args"]},
            "config": {"allow_accept": True, "allow_edit": allow_edit, "allow_respond": True, "allow_ignore": False},
            "description": "Delete a repository for good.",
        }
        response = interrupt([request])[0]
        if response["type"] == "accept":
            args = state["args"]
        elif response["type"] == "edit":
            args = response["args"]["args"]
        else:
            return {"outcome": f"not run: {response['args']}"}
        ran.append(args)
        return {"outcome": f"deleted {args['repo']}"}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("review", review)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
def site(tmp_path: Path) -> tuple[str, berth.Sealer]:
    return f"sqlite:///{tmp_path}/b.db", berth.AesGcmSealer(berth.Keyring.generate())


def park(site: tuple[str, berth.Sealer], ran: list[Any], **kw: Any) -> tuple[Any, berth.QuestionStore, berth.Question]:
    url, sealer = site
    g = graph(BerthSaver(berth.open_store(url, identity=IDENTITY, sealer=sealer)), ran, **kw)
    paused = g.invoke({}, CONFIG)
    assert "__interrupt__" in paused and ran == []
    questions = berth.open_questions(url, identity=IDENTITY, sealer=sealer)
    (asked,) = [q for q, _ in questions.list("langgraph/ticket-7/")]
    return g, questions, asked


def resume(g: Any, questions: berth.QuestionStore, asked: berth.Question) -> Any:
    answer = questions.answer(asked.key)
    assert answer is not None and asked.tool is not None
    return resume_once(g, CONFIG, {answer.question_id: [human_response(answer, asked.tool.name)]})


def test_a_human_interrupt_is_a_structured_tool_approval(site: tuple[str, berth.Sealer]) -> None:
    _, _, asked = park(site, [])
    assert asked.accepts == (D.APPROVE, D.EDIT, D.REJECT, D.RESPOND)
    assert asked.tool is not None
    assert (asked.tool.name, dict(asked.tool.arguments)) == ("delete_repo", {"repo": "acme/old"})
    assert asked.tool.description == "Delete a repository for good."
    assert "delete_repo" in asked.prompt and "acme/old" in asked.prompt
    _, _, without_edit = park((site[0].replace("b.db", "c.db"), site[1]), [], allow_edit=False)
    assert D.EDIT not in without_edit.accepts


def test_an_edit_resumes_the_graph_with_exactly_the_edited_arguments(site: tuple[str, berth.Sealer]) -> None:
    ran: list[Any] = []
    g, questions, asked = park(site, ran)
    questions.provide(asked.key, asked.id, "", by="alice", decision="edit", arguments={"repo": "acme/older"})
    out = resume(g, questions, asked)
    assert ran == [{"repo": "acme/older"}] and out["outcome"] == "deleted acme/older"


def test_an_approval_resumes_the_graph_with_the_asked_arguments(site: tuple[str, berth.Sealer]) -> None:
    ran: list[Any] = []
    g, questions, asked = park(site, ran)
    questions.provide(asked.key, asked.id, "approve", by="alice")
    assert resume(g, questions, asked)["outcome"] == "deleted acme/old" and ran == [{"repo": "acme/old"}]


def test_free_text_never_accepts(site: tuple[str, berth.Sealer]) -> None:
    ran: list[Any] = []
    g, questions, asked = park(site, ran)
    questions.provide(asked.key, asked.id, "yes but only archive it", by="alice")
    out = resume(g, questions, asked)
    assert ran == [] and out["outcome"] == "not run: yes but only archive it"


def test_a_plain_interrupt_still_asks_for_free_text(tmp_path: Path) -> None:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def ask(state: State) -> State:
        return {"outcome": interrupt({"question": "run it?"})}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    url, sealer = f"sqlite:///{tmp_path}/b.db", berth.AesGcmSealer(berth.Keyring.generate())
    builder.compile(checkpointer=BerthSaver(berth.open_store(url, identity=IDENTITY, sealer=sealer))).invoke({}, CONFIG)
    ((asked, _),) = list(berth.open_questions(url, identity=IDENTITY, sealer=sealer).list("langgraph/"))
    assert asked.prompt == '{"question":"run it?"}' and asked.accepts == () and asked.tool is None


def test_human_response_maps_each_decision() -> None:
    from datetime import datetime, timezone

    def answer(decision: berth.Decision, text: str = "", arguments: dict[str, Any] | None = None) -> berth.Answer:
        return berth.Answer("q", text, "alice", datetime.now(timezone.utc), decision, arguments)

    assert human_response(answer(D.APPROVE, "note")) == {"type": "accept", "args": None}
    assert human_response(answer(D.EDIT, "", {"a": 1}), "act") == {
        "type": "edit",
        "args": {"action": "act", "args": {"a": 1}},
    }
    assert human_response(answer(D.REJECT, "why")) == {"type": "response", "args": "why"}
    assert human_response(answer(D.RESPOND, "yes but")) == {"type": "response", "args": "yes but"}
    assert human_response(answer(D.IGNORE)) == {"type": "ignore", "args": None}
