"""Structured decisions in the inbox's JSON API: what a question accepts, the tool it is about, decisions posted."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

import berth
from tests.serve.conftest import ALICE, BOB, IDENTITY, Park, Server, bearer

TOOL = berth.ToolRequest(
    "archive_repo", {"repo": "acme/old", "force": False}, agent="ops", description="Archive a repo", call_id="c1"
)


def approval(park: Park, name: str) -> tuple[str, berth.Question]:
    """Park a run and ask a tool approval about it (as the framework integrations do)."""
    key, _ = park(name, "placeholder")
    questions = park.server.questions[IDENTITY]
    asked = questions.pending(key)
    assert asked is not None
    q = questions.ask(
        key,
        "May ops archive acme/old?",
        run_id=asked.run_id,
        question_id=asked.id,  # the id the parked run is bound to
        accepts=["approve", "reject", "edit", "respond"],
        tool=TOOL,
    )
    return key, q


def listed(server: Server, park: Park) -> list[dict[str, Any]]:
    r = httpx.get(server.url + "/api/questions", params={"prefix": park.prefix}, headers=bearer(ALICE))
    assert r.status_code == 200, r.text
    docs: list[dict[str, Any]] = r.json()
    return docs


def post(server: Server, doc: object, token: str = BOB) -> httpx.Response:
    return httpx.post(server.url + "/api/answers", json=doc, headers=bearer(token))


def test_each_question_lists_its_decisions_and_a_tool_approval_its_tool(inbox: Server, park: Park) -> None:
    plain, _ = park("plain", "What priority?")
    key, q = approval(park, "tool")
    docs = {d["key"]: d for d in listed(inbox, park)}
    assert docs[plain]["decisions"] == ["respond"] and docs[plain]["tool"] is None
    doc = docs[key]
    assert doc["question_id"] == q.id
    assert doc["decisions"] == ["approve", "reject", "edit", "respond"]
    assert doc["tool"] == {
        "name": "archive_repo",
        "arguments": {"repo": "acme/old", "force": False},
        "agent": "ops",
        "description": "Archive a repo",
        "call_id": "c1",
    }


def test_an_edit_is_recorded_with_exactly_the_new_arguments(
    inbox: Server, park: Park, caplog: pytest.LogCaptureFixture
) -> None:
    key, q = approval(park, "edit")
    new = {"repo": "acme/older", "force": True}
    with caplog.at_level(logging.INFO, logger="berth.serve.audit"):
        r = post(inbox, {"key": key, "question_id": q.id, "decision": "edit", "arguments": new, "text": "older"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["decision"], body["arguments"], body["text"], body["by"]) == ("edit", new, "older", "bob")
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.decision is berth.Decision.EDIT and dict(stored.arguments or {}) == new
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "berth.serve.audit"]
    assert len(lines) == 1 and "decision=edit" in lines[0] and "acme/older" not in lines[0]


def test_approve_keeps_its_note_and_reject_its_reason(inbox: Server, park: Park) -> None:
    key, q = approval(park, "approve")
    r = post(inbox, {"key": key, "question_id": q.id, "decision": "approve", "text": "fine"})
    assert r.status_code == 201 and (r.json()["decision"], r.json()["text"]) == ("approve", "fine")
    key2, q2 = approval(park, "reject")
    r = post(inbox, {"key": key2, "question_id": q2.id, "decision": "reject", "text": "not on a Friday"})
    assert r.status_code == 201 and (r.json()["decision"], r.json()["text"]) == ("reject", "not on a Friday")


def test_free_text_to_an_approval_never_approves(inbox: Server, park: Park) -> None:
    key, q = approval(park, "free")
    r = post(inbox, {"key": key, "question_id": q.id, "text": "yes but only archive it"})
    assert r.status_code == 201 and r.json()["decision"] == "respond"
    key2, q2 = approval(park, "exact")
    r = post(inbox, {"key": key2, "question_id": q2.id, "text": "Yes"})
    assert r.status_code == 201 and r.json()["decision"] == "approve"


@pytest.mark.parametrize(
    "extra",
    [
        {"decision": "launch"},
        {"decision": 1},
        {"decision": "edit"},
        {"decision": "edit", "arguments": ["a"]},
        {"decision": "edit", "arguments": "{}"},
        {"decision": "approve", "arguments": {"a": 1}},
        {"arguments": {"a": 1}, "text": "x"},
        {"decision": "reject", "text": 5},
        {},  # neither a decision nor text
        {"decision": "ignore"},  # not one this question accepts
    ],
)
def test_malformed_decisions_are_400_and_record_nothing(inbox: Server, park: Park, extra: dict[str, Any]) -> None:
    key, q = approval(park, "bad")
    r = post(inbox, {"key": key, "question_id": q.id, **extra})
    assert r.status_code == 400, r.text
    assert "error" in r.json()
    assert inbox.questions[IDENTITY].answer(key) is None


def test_a_decision_on_a_free_text_question_is_400(inbox: Server, park: Park) -> None:
    key, q = park("plain-approve", "What priority?")
    r = post(inbox, {"key": key, "question_id": q.id, "decision": "approve"})
    assert r.status_code == 400 and "accepts respond" in r.json()["error"]
    r = post(inbox, {"key": key, "question_id": q.id, "decision": "respond", "text": "P2"})
    assert r.status_code == 201 and r.json()["decision"] == "respond"


def test_a_choices_label_host_still_gets_approve_as_text(inbox: Server, park: Park) -> None:
    key, q = park("label", "Ship it?", labels={"berth.choices": "approve,reject"})
    r = post(inbox, {"key": key, "question_id": q.id, "decision": "approve", "text": "go"})
    assert r.status_code == 201, r.text
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.text == "approve: go"


def test_openapi_describes_decisions(inbox: Server) -> None:
    spec = httpx.get(inbox.url + "/api/openapi.json").json()
    body = spec["paths"]["/api/answers"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["decision"]["enum"] == ["approve", "reject", "edit", "respond", "ignore"]
    assert "arguments" in body["properties"] and body["required"] == ["key", "question_id"]
    item = spec["paths"]["/api/questions"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert {"decisions", "tool"} <= set(item["items"]["properties"])
