"""The inbox's JSON API over HTTP: every status code, answers bound to the question seen, who answered."""

from __future__ import annotations

import logging
from datetime import timedelta

import httpx
import pytest

from tests.serve.conftest import ALICE, BOB, IDENTITY, OTHER, Park, Server, bearer


def questions(server: Server, token: str, **params: str) -> httpx.Response:
    return httpx.get(server.url + "/api/questions", params=params, headers=bearer(token))


def answer(server: Server, token: str | None, doc: object, **kw: object) -> httpx.Response:
    headers = bearer(token) if token else {}
    return httpx.post(server.url + "/api/answers", json=doc, headers=headers, **kw)  # type: ignore[arg-type]


def test_questions_lists_open_questions_newest_first_with_the_pinned_fields(inbox: Server, park: Park) -> None:
    first, q1 = park("a", "Push the fix?", labels={"team": "core"})
    second, q2 = park("b", "Close as duplicate?")
    r = questions(inbox, ALICE, prefix=park.prefix)
    assert r.status_code == 200
    docs = r.json()
    assert [d["key"] for d in docs] == [second, first]
    doc = docs[1]
    assert {"key", "question_id", "prompt", "run_id", "asked_at", "deadline", "labels"} <= set(doc)
    assert doc["question_id"] == q1.id and doc["prompt"] == "Push the fix?"
    assert doc["labels"]["team"] == "core" and doc["deadline"].endswith("Z")
    assert doc["identity"] == IDENTITY and doc["answered"] is False
    assert "SEALED-STATE" not in r.text  # never sealed state


def test_questions_are_paginated_and_filtered_on_the_server(inbox: Server, park: Park) -> None:
    keys = [park(f"k{n}", f"question {n}", labels={"n": str(n % 2)})[0] for n in range(5)]
    r = questions(inbox, ALICE, prefix=park.prefix, limit="2")
    assert r.status_code == 200 and [d["key"] for d in r.json()] == keys[::-1][:2]
    assert r.headers["x-total-count"] == "5"
    assert "offset=2" in r.headers["link"] and 'rel="next"' in r.headers["link"]
    page2 = httpx.get(inbox.url + r.headers["link"].split(">")[0][1:], headers=bearer(ALICE))
    assert [d["key"] for d in page2.json()] == keys[::-1][2:4]
    odd = questions(inbox, ALICE, prefix=park.prefix, label="n=1")
    assert sorted(d["key"] for d in odd.json()) == sorted(keys[1::2])
    other, _ = park("elsewhere", "in support", identity=OTHER)
    only = questions(inbox, ALICE, prefix=park.prefix, identity=OTHER)
    assert [d["key"] for d in only.json()] == [other]


def test_answer_is_201_recorded_as_the_token_holder_and_audited(
    inbox: Server, park: Park, caplog: pytest.LogCaptureFixture
) -> None:
    key, q = park("x", "Refund 40 EUR?")
    with caplog.at_level(logging.INFO, logger="berth.serve.audit"):
        r = answer(inbox, BOB, {"key": key, "question_id": q.id, "text": "yes", "by": "mallory"})
    assert r.status_code == 201, r.text
    assert r.json()["by"] == "bob" and r.json()["text"] == "yes"
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.by == "bob" and stored.question_id == q.id
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "berth.serve.audit"]
    assert len(lines) == 1 and f"key={key!r}" in lines[0] and "by='bob'" in lines[0] and "yes" not in lines[0]
    listed = questions(inbox, ALICE, prefix=park.prefix).json()
    assert listed[0]["answered"] is True and listed[0]["answered_by"] == "bob"


def test_answer_to_a_superseded_question_is_409_with_the_new_question(inbox: Server, park: Park) -> None:
    key, old = park("s", "Deploy v1?")
    new = park.ask_again(key, "Deploy v2 instead?")
    r = answer(inbox, ALICE, {"key": key, "question_id": old.id, "text": "yes"})
    assert r.status_code == 409
    assert r.json()["question"]["question_id"] == new.id and r.json()["question"]["prompt"] == "Deploy v2 instead?"
    assert inbox.questions[IDENTITY].answer(key) is None  # nothing recorded


def test_answer_twice_is_409(inbox: Server, park: Park) -> None:
    key, q = park("twice", "Merge?")
    assert answer(inbox, ALICE, {"key": key, "question_id": q.id, "text": "yes"}).status_code == 201
    r = answer(inbox, BOB, {"key": key, "question_id": q.id, "text": "no"})
    assert r.status_code == 409 and "already answered" in r.json()["error"]
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.text == "yes" and stored.by == "alice"


def test_answer_where_nothing_is_parked_is_404(inbox: Server, park: Park) -> None:
    r = answer(inbox, ALICE, {"key": park.prefix + "nothing", "question_id": "q", "text": "yes"})
    assert r.status_code == 404 and "nothing is pending" in r.json()["error"]
    unknown = answer(inbox, ALICE, {"key": "k", "question_id": "q", "text": "y", "identity": "nobody"})
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": f"Basic {ALICE}"}],
    ids=["none", "wrong", "not-bearer"],
)
def test_api_without_a_valid_token_is_401(inbox: Server, park: Park, headers: dict[str, str]) -> None:
    key, q = park("auth", "Ship?")
    for r in (
        httpx.get(inbox.url + "/api/questions", headers=headers),
        httpx.get(inbox.url + "/api/runs", headers=headers),
        httpx.get(inbox.url + "/metrics", headers=headers),
        httpx.post(inbox.url + "/api/answers", json={"key": key, "question_id": q.id, "text": "y"}, headers=headers),
    ):
        assert r.status_code == 401, r.request.url
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "Ship?" not in r.text
    assert inbox.questions[IDENTITY].answer(key) is None


def test_malformed_answers_are_400_or_415(inbox: Server, park: Park) -> None:
    key, q = park("bad", "Ship?")
    assert answer(inbox, ALICE, {"key": key}).status_code == 400
    assert answer(inbox, ALICE, ["not", "an", "object"]).status_code == 400
    assert answer(inbox, ALICE, {"key": "/abs", "question_id": q.id, "text": "y"}).status_code == 400
    form = httpx.post(
        inbox.url + "/api/answers", data={"key": key, "question_id": q.id, "text": "y"}, headers=bearer(ALICE)
    )
    assert form.status_code == 415  # a cross-site form cannot post JSON
    assert inbox.questions[IDENTITY].answer(key) is None


def test_runs_lists_headers_only(inbox: Server, park: Park) -> None:
    keys = sorted(park(f"r{n}", "?", labels={"env": "prod"})[0] for n in range(3))
    r = httpx.get(inbox.url + "/api/runs", params={"prefix": park.prefix, "limit": "2"}, headers=bearer(ALICE))
    assert r.status_code == 200 and len(r.json()) == 2 and 'rel="next"' in r.headers["link"]
    rest = httpx.get(
        inbox.url + "/api/runs", params={"prefix": park.prefix, "offset": "2"}, headers=bearer(ALICE)
    ).json()
    docs = r.json() + rest
    assert sorted(d["key"] for d in docs) == keys
    assert set(docs[0]) == {"identity", "key", "run_id", "created_at", "deadline", "size", "labels", "sealed_by"}
    assert docs[0]["sealed_by"].startswith("aes") and "SEALED-STATE" not in r.text


def test_health_openapi_and_security_headers(inbox: Server) -> None:
    health = httpx.get(inbox.url + "/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    schema = httpx.get(inbox.url + "/api/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    assert {"/api/questions", "/api/answers", "/api/runs"} <= set(schema["paths"])
    assert set(schema["paths"]["/api/answers"]["post"]["responses"]) >= {"201", "401", "404", "409"}
    csp = health.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert health.headers["x-content-type-options"] == "nosniff"


def test_metrics_in_prometheus_text_format(inbox: Server, park: Park) -> None:
    park("m", "Counted?")
    r = httpx.get(inbox.url + "/metrics", headers=bearer(ALICE))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples[f'berth_parked_runs{{identity="{IDENTITY}"}}'] >= 1
    assert samples[f'berth_open_questions{{identity="{IDENTITY}"}}'] >= 1
    assert f'berth_oldest_question_age_seconds{{identity="{OTHER}"}}' in samples
    assert f'berth_expired_unswept{{identity="{IDENTITY}"}}' in samples
    assert f'berth_answers_total{{identity="{IDENTITY}",via="api"}}' in samples
    assert "berth_failed_logins_total" in samples
    assert "# TYPE berth_answers_total counter" in r.text


def test_answer_to_an_expired_question_is_410_with_the_reason(inbox: Server, park: Park) -> None:
    key, q = park("late", "Still want this?", deadline=timedelta(seconds=-5))
    listed = questions(inbox, ALICE, prefix=park.prefix).json()
    assert [d["expired"] for d in listed] == [True]  # listed, and said not to be answerable
    r = answer(inbox, ALICE, {"key": key, "question_id": q.id, "text": "yes"})
    assert r.status_code == 410 and "expired" in r.json()["error"] and "never resume" in r.json()["error"]
    assert r.json()["question"]["question_id"] == q.id
    assert inbox.questions[IDENTITY].answer(key) is None  # nothing recorded
    schema = httpx.get(inbox.url + "/api/openapi.json").json()
    assert "410" in schema["paths"]["/api/answers"]["post"]["responses"]


def test_questions_sort_by_nearest_deadline(inbox: Server, park: Park) -> None:
    soon, _ = park("soon", "first?", deadline=timedelta(minutes=5))
    later, _ = park("later", "second?", deadline=timedelta(hours=5))
    assert [d["key"] for d in questions(inbox, ALICE, prefix=park.prefix).json()] == [later, soon]
    assert [d["key"] for d in questions(inbox, ALICE, prefix=park.prefix, sort="deadline").json()] == [soon, later]
    assert questions(inbox, ALICE, sort="sideways").status_code == 400
