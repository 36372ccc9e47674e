"""The inbox's HTTP surface under attack (issue 30.4): what is cached, what a link can say, malformed fields."""

from __future__ import annotations

import httpx

from tests.serve.conftest import ALICE, IDENTITY, Park, Server, bearer
from tests.serve.test_auth import csrf_of, logged_in

# --- nothing that carries a prompt is stored by a cache -------------------------------------------


def test_every_response_that_carries_prompts_is_no_store(inbox: Server, park: Park) -> None:
    key, q = park("cache", "Secret prompt?")
    api = httpx.Client(base_url=inbox.url, headers=bearer(ALICE))
    client = logged_in(inbox)
    responses = [
        api.get("/api/questions", params={"prefix": park.prefix}),
        api.get("/api/runs", params={"prefix": park.prefix}),
        api.get("/metrics"),
        api.post("/api/answers", json={"key": key, "question_id": "other", "text": "no"}),  # 409, with the question
        api.get("/api/questions", params={"identity": "nobody"}),  # an error
        client.get("/", params={"prefix": park.prefix}),
        client.get("/inbox/live", params={"prefix": park.prefix}),
    ]
    for r in responses:
        assert r.headers.get("cache-control") == "no-store", (r.request.url, r.status_code)
    assert "Secret prompt?" in responses[0].text and "Secret prompt?" in responses[3].text
    live = responses[-1]
    again = client.get("/inbox/live", params={"prefix": park.prefix}, headers={"If-None-Match": live.headers["etag"]})
    assert again.status_code == 304 and again.headers["cache-control"] == "no-store"
    assert "no-store" not in api.get("/static/inbox.css").headers.get("cache-control", "")
    api.close()
    client.close()


# --- the success notice says only what the server itself wrote --------------------------------------


def test_a_link_cannot_put_its_own_text_into_the_success_notice(inbox: Server, park: Park) -> None:
    key, q = park("notice", "Ship it?")
    client = logged_in(inbox)
    lure = "org/repo#1. Your session expired: re-enter your token at evil.example"
    page = client.get("/", params={"prefix": park.prefix, "done": lure})
    assert page.status_code == 200 and "evil.example" not in page.text and 'class="notice' not in page.text
    forged = client.get("/", params={"done": lure, "mac": "0" * 32})
    assert "evil.example" not in forged.text
    form = {"identity": IDENTITY, "key": key, "question_id": q.id, "text": "yes", "choice": "respond"}
    done = client.post("/answer", data={**form, "csrf": csrf_of(page.text)}, follow_redirects=True)
    assert done.status_code == 200 and f"Answered {key} as alice." in done.text
    client.close()


# --- malformed fields are 400, never a 500 -----------------------------------------------------------


def post_raw(server: Server, body: bytes) -> httpx.Response:
    headers = {**bearer(ALICE), "Content-Type": "application/json"}
    return httpx.post(server.url + "/api/answers", content=body, headers=headers)


def test_malformed_fields_are_400_not_a_server_error(inbox: Server, park: Park) -> None:
    key, q = park("malformed", "Ship?")
    listed = httpx.post(
        inbox.url + "/api/answers",
        json={"identity": [IDENTITY], "key": key, "question_id": q.id, "text": "yes"},
        headers=bearer(ALICE),
    )
    assert listed.status_code == 400 and "identity" in listed.json()["error"]
    for field in ("text", "key", "question_id"):
        doc = {"key": key, "question_id": q.id, "text": "yes"}
        raw = httpx.Request("POST", "/", json={**doc, field: "LONE"}).content.replace(b"LONE", b"\\ud800")
        r = post_raw(inbox, raw)
        assert r.status_code == 400, (field, r.text)
        assert field in r.json()["error"] and "surrogate" in r.json()["error"]
    nested = b'{"key": "%s", "question_id": "%s", "text": "y", "arguments": {"path": ["\\udfff"]}}' % (
        key.encode(),
        q.id.encode(),
    )
    r = post_raw(inbox, nested)
    assert r.status_code == 400 and "arguments" in r.json()["error"]
    assert inbox.questions[IDENTITY].answer(key) is None
    pair = b'{"key": "%s", "question_id": "%s", "text": "\\ud83d\\ude00"}' % (key.encode(), q.id.encode())
    fine = post_raw(inbox, pair)
    assert fine.status_code == 201 and fine.json()["text"] == "\U0001f600"  # a surrogate pair is one character
