"""The page tells the approver the truth over HTTP: expired questions, ended sessions, error pages that lead back."""

from __future__ import annotations

from contextlib import closing
from datetime import timedelta

from tests.serve.conftest import ALICE, IDENTITY, Park, Server
from tests.serve.test_auth import csrf_of, logged_in


def test_an_expired_question_has_no_form_and_an_answer_to_it_is_410_saying_nothing_was_recorded(
    inbox: Server, park: Park
) -> None:
    key, q = park("late", "Still want this?", deadline=timedelta(seconds=-5))
    with closing(logged_in(inbox)) as client:
        page = client.get("/", params={"prefix": park.prefix})
        assert "expired" in page.text and 'name="question_id"' not in page.text  # shown, not answerable
        assert "the run will never resume" in page.text
        form = {"identity": IDENTITY, "key": key, "question_id": q.id, "text": "yes", "choice": "respond"}
        r = client.post("/answer", data={**form, "csrf": csrf_of(page.text)})
        assert r.status_code == 410
        assert "expired before your answer arrived" in r.text and "nothing was recorded" in r.text
        assert "Your answer, not recorded" in r.text  # what was typed is not lost
        assert inbox.questions[IDENTITY].answer(key) is None


def test_an_answer_sent_after_the_session_ended_leads_back_to_the_inbox_saying_it_was_not_recorded(
    inbox: Server, park: Park
) -> None:
    key, q = park("session", "Ship it?")
    with closing(logged_in(inbox)) as client:
        page = client.get("/", params={"prefix": park.prefix})
        inbox.auth.logout(client.cookies["berth_session"])  # as a restart or the 12-hour expiry would
        form = {"identity": IDENTITY, "key": key, "question_id": q.id, "text": "yes", "choice": "respond"}
        r = client.post("/answer", data={**form, "csrf": csrf_of(page.text)})
        assert r.status_code == 303 and r.headers["location"] == "/login?next=%2F%3Flost%3D1"  # never to GET /answer
        login = client.get(r.headers["location"])
        done = client.post("/login", data={"token": ALICE, "csrf": csrf_of(login.text), "next": "/?lost=1"})
        assert done.status_code == 303 and done.headers["location"] == "/?lost=1"
        back = client.get("/?lost=1")
        assert "nothing was recorded" in back.text and "data-lost" in back.text
        assert inbox.questions[IDENTITY].answer(key) is None
        assert client.get("/answer").headers["location"] == "/"  # a reload of the form's address: no bare 405


def test_error_pages_lead_back_to_the_inbox(inbox: Server) -> None:
    with closing(logged_in(inbox)) as client:
        for path in ("/no/such/page", "/?identity=nobody", "/?offset=x"):
            r = client.get(path)
            assert r.status_code in (400, 404), path
            assert r.headers["content-type"].startswith("text/html") and 'href="/" id="back"' in r.text, path
        api = client.get("/api/no-such-thing")
        assert api.status_code == 404 and api.headers["content-type"] == "application/json"


def test_an_answer_from_a_page_older_than_the_session_leads_back_saying_it_was_not_recorded(
    inbox: Server, park: Park
) -> None:
    key, q = park("stale", "Ship it?")
    with closing(logged_in(inbox)) as client:
        page = client.get("/", params={"prefix": park.prefix})
        inbox.auth.logout(client.cookies["berth_session"])
        again = client.get("/login")
        assert client.post("/login", data={"token": ALICE, "csrf": csrf_of(again.text)}).status_code == 303
        form = {"identity": IDENTITY, "key": key, "question_id": q.id, "text": "yes", "choice": "respond"}
        r = client.post("/answer", data={**form, "csrf": csrf_of(page.text)})  # the old page's token
        assert r.status_code == 403  # refused, and the page says why and leads on: not a bare 403
        assert "earlier session" in r.text and "data-lost" in r.text and 'id="live"' in r.text
        assert inbox.questions[IDENTITY].answer(key) is None
