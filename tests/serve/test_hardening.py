"""The inbox's HTTP surface under attack (issue 30.4): what is cached, what a link can say, malformed fields."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import berth
from berth._cli import cli
from berth._serve import Auth, AuthError, Inbox, Source, _auth, _inbox, build_app, parse_proxies, parse_tokens
from berth._serve._auth import FAILURE_WINDOW, FAILURES_ALLOWED
from tests.serve.conftest import ALICE, IDENTITY, TOKENS, Park, Server, bearer, serving
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


# --- request bodies are bounded before they are read -------------------------------------------------

CHUNK = 64 << 10


class Body:
    """An ASGI `receive` that offers `total` bytes of `fill` in 64 KiB chunks and counts what was read."""

    def __init__(self, total: int, fill: bytes = b"a") -> None:
        self.total = total
        self.fill = fill
        self.read = 0

    async def __call__(self) -> dict[str, Any]:
        if self.read >= self.total:
            return {"type": "http.disconnect"}
        self.read += CHUNK
        return {"type": "http.request", "body": self.fill * CHUNK, "more_body": self.read < self.total}


def call(app: Any, path: str, headers: dict[str, str], body: Body) -> int:
    """Run one POST through the ASGI app; the response's status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8470),
    }
    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    asyncio.run(app(scope, body, send))
    return status[0]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Any]:
    url = f"sqlite:///{tmp_path}/bodies.db"
    source = Source(
        IDENTITY,
        berth.open_store(url, identity=IDENTITY, sealer=berth.PlaintextSealer()),
        berth.open_questions(url, identity=IDENTITY, sealer=berth.PlaintextSealer()),
    )
    yield build_app([source], Auth(tokens=parse_tokens(TOKENS)), max_age=0)
    source.store.close()
    source.questions.close()


BIG = 32 << 20
FORM = {"content-type": "application/x-www-form-urlencoded", "cookie": "berth_csrf=c" + "x" * 30}
JSON = {"content-type": "application/json", "authorization": f"Bearer {ALICE}"}


@pytest.mark.parametrize(("path", "headers", "bound"), [("/login", FORM, 16 << 10), ("/api/answers", JSON, 1 << 20)])
def test_a_body_is_never_read_past_its_bound(app: Any, path: str, headers: dict[str, str], bound: int) -> None:
    streamed = Body(BIG, b" " if path.startswith("/api") else b"a")  # no Content-Length: counted as it comes
    assert call(app, path, headers, streamed) == 413
    assert streamed.read <= bound + CHUNK
    declared = Body(BIG)
    assert call(app, path, {**headers, "content-length": str(BIG)}, declared) == 413
    assert declared.read == 0  # refused by its Content-Length before reading any of it


def test_a_login_without_its_csrf_cookie_is_refused_before_its_body_is_read(app: Any) -> None:
    body = Body(8 << 10)
    assert call(app, "/login", {"content-type": "application/x-www-form-urlencoded"}, body) == 403
    assert body.read == 0


def test_an_oversized_request_is_answered_at_once_without_sending_its_body(inbox: Server) -> None:
    host, port = inbox.url.removeprefix("http://").split(":")
    for path, headers in (
        ("/login", "Content-Type: application/x-www-form-urlencoded\r\nCookie: berth_csrf=abc\r\n"),
        ("/api/answers", f"Content-Type: application/json\r\nAuthorization: Bearer {ALICE}\r\n"),
    ):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
            s.sendall((head + f"Content-Length: {200 << 20}\r\n\r\n").encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 413 "), path  # the 200 MiB were never sent


# --- identical answers sent at once are acknowledged once ---------------------------------------------


def answers_counted(server: Server) -> float:
    metrics = httpx.get(server.url + "/metrics", headers=bearer(ALICE)).text
    line = next(
        x for x in metrics.splitlines() if x.startswith(f'berth_answers_total{{identity="{IDENTITY}",via="api"}}')
    )
    return float(line.rsplit(" ", 1)[1])


def test_identical_concurrent_answers_are_acknowledged_once(
    inbox: Server, park: Park, caplog: pytest.LogCaptureFixture
) -> None:
    key, q = park("burst", "Deploy?")
    doc = {"key": key, "question_id": q.id, "text": "yes"}
    before = answers_counted(inbox)
    start = threading.Barrier(50)

    def send(_: int) -> int:
        with httpx.Client(base_url=inbox.url, headers=bearer(ALICE), timeout=30) as client:
            start.wait()
            return client.post("/api/answers", json=doc).status_code

    with caplog.at_level(logging.INFO, logger="berth.serve.audit"):
        with ThreadPoolExecutor(50) as pool:
            statuses = sorted(pool.map(send, range(50)))
    assert statuses == [201] + [409] * 49
    audited = [r for r in caplog.records if r.name == "berth.serve.audit" and f"key={key!r}" in r.getMessage()]
    assert len(audited) == 1
    assert answers_counted(inbox) == before + 1


# --- the trusted header: only from the named proxies, read as UTF-8 ---------------------------------


def test_a_trusted_header_needs_the_proxies_it_is_believed_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AuthError, match="needs --forwarded-allow-ips"):
        Auth(trusted_header="X-Forwarded-User")
    for bad in ("*", "proxy.internal", "10.0.0.300"):
        with pytest.raises(AuthError, match="not an IP address or network"):
            parse_proxies(bad)
    assert [str(n) for n in parse_proxies("10.0.0.5, 10.1.0.0/16,[::1]")] == ["10.0.0.5/32", "10.1.0.0/16", "::1/128"]
    monkeypatch.delenv("BERTH_SERVE_TOKEN", raising=False)
    monkeypatch.setenv("BERTH_URL", f"sqlite:///{tmp_path}/b.db")
    result = CliRunner().invoke(cli, ["serve", "--trusted-header", "X-Forwarded-User"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--forwarded-allow-ips" in result.output and "Traceback" not in result.output


@contextmanager
def proxied(tmp_path: Path, keyring: berth.Keyring, proxies: str) -> Iterator[Server]:
    auth = Auth(tokens=parse_tokens(TOKENS), trusted_header="X-Forwarded-User", forwarded_allow_ips=proxies)
    with serving(tmp_path / "proxied.db", keyring, auth) as server:
        yield server


def test_a_trusted_header_from_a_peer_that_is_not_the_proxy_is_not_believed(
    tmp_path: Path, keyring: berth.Keyring
) -> None:
    with proxied(tmp_path, keyring, "10.0.0.5,192.168.0.0/16") as server:  # the test client is 127.0.0.1
        key, q = Park(server)("k", "Wire the money?")
        cto = {"X-Forwarded-User": "cto"}
        doc = {"key": key, "question_id": q.id, "text": "approve"}
        assert httpx.post(server.url + "/api/answers", json=doc, headers=cto).status_code == 401
        assert httpx.get(server.url + "/api/questions", headers=cto).status_code == 401
        page = httpx.get(server.url + "/", headers=cto)
        assert page.status_code == 303 and page.headers["location"] == "/login"
        assert server.questions[IDENTITY].answer(key) is None
        by_token = httpx.post(server.url + "/api/answers", json=doc, headers={**cto, **bearer(ALICE)})
        assert by_token.status_code == 201 and by_token.json()["by"] == "alice"  # a token still works


def test_a_trusted_header_is_read_as_utf8(tmp_path: Path, keyring: berth.Keyring) -> None:
    with proxied(tmp_path, keyring, "127.0.0.0/8") as server:
        key, q = Park(server)("k", "Ship?")
        name = "José Müller 山田"
        doc = {"key": key, "question_id": q.id, "text": "yes"}
        broken = httpx.post(server.url + "/api/answers", json=doc, headers={b"X-Forwarded-User": b"Jos\xe9"})
        assert broken.status_code == 401  # not UTF-8: nobody
        r = httpx.post(server.url + "/api/answers", json=doc, headers={b"X-Forwarded-User": name.encode()})
        assert r.status_code == 201 and r.json()["by"] == name
        stored = server.questions[IDENTITY].answer(key)
        assert stored is not None and stored.by == name


def test_forwarded_for_and_proto_are_believed_only_from_the_proxies(
    tmp_path: Path, keyring: berth.Keyring, caplog: pytest.LogCaptureFixture
) -> None:
    forwarded = {"X-Forwarded-For": "203.0.113.9, 127.0.0.1", "X-Forwarded-Proto": "https"}
    for proxies, client, secure in (("127.0.0.1", "203.0.113.9", True), ("10.0.0.5", "127.0.0.1", False)):
        caplog.clear()
        with proxied(tmp_path / proxies, keyring, proxies) as server, httpx.Client(base_url=server.url) as c:
            form = c.get("/login")
            with caplog.at_level(logging.WARNING, logger="berth.serve"):
                r = c.post("/login", data={"token": "w" * 40, "csrf": csrf_of(form.text)}, headers=forwarded)
            assert r.status_code == 401
            assert any(f"failed login from {client}" in rec.getMessage() for rec in caplog.records), proxies
            ok = c.post("/login", data={"token": ALICE, "csrf": csrf_of(form.text)}, headers=forwarded)
            assert ok.status_code == 303 and ("secure" in ok.headers["set-cookie"].lower()) is secure


# --- wrong tokens: counted, logged without the token, limited per client address ----------------------


def test_wrong_bearer_tokens_are_counted_logged_and_limited_per_client(
    tmp_path: Path, keyring: berth.Keyring, caplog: pytest.LogCaptureFixture
) -> None:
    auth = Auth(tokens=parse_tokens(TOKENS), forwarded_allow_ips="127.0.0.1")
    attacker = {"X-Forwarded-For": "198.51.100.7"}
    guesses = [f"guess-{n}-" + "z" * 30 for n in range(FAILURES_ALLOWED)]
    with serving(tmp_path / "limited.db", keyring, auth) as server, httpx.Client(base_url=server.url) as c:
        with caplog.at_level(logging.WARNING, logger="berth.serve"):
            for guess in guesses[:-1]:
                assert c.get("/api/questions", headers={**attacker, **bearer(guess)}).status_code == 401
            metrics = c.get("/metrics", headers={**attacker, **bearer(ALICE)}).text
            assert "\nberth_failed_tokens_total 9\n" in metrics and "\nberth_rate_limited_total 0\n" in metrics
            assert c.get("/api/runs", headers={**attacker, **bearer(guesses[-1])}).status_code == 401
        logged = [r.getMessage() for r in caplog.records if r.name == "berth.serve"]
        assert sum("wrong bearer token from 198.51.100.7 on GET /api/" in line for line in logged) == FAILURES_ALLOWED
        assert any("refused (429)" in line for line in logged)
        assert not any(g in line for g in guesses for line in logged)  # never the token itself
        limited = c.get("/api/questions", headers={**attacker, **bearer(ALICE)})  # even the right one, unchecked
        assert limited.status_code == 429 and 0 < int(limited.headers["retry-after"]) <= FAILURE_WINDOW
        assert "too many wrong tokens" in limited.json()["error"]
        form = c.get("/login")
        login = c.post("/login", data={"token": ALICE, "csrf": csrf_of(form.text)}, headers=attacker)
        assert login.status_code == 429 and "berth_session" not in login.headers.get("set-cookie", "")
        other = c.get("/api/questions", headers={"X-Forwarded-For": "198.51.100.8", **bearer(ALICE)})
        assert other.status_code == 200  # another client address is not held up
        assert auth.failed_tokens == FAILURES_ALLOWED and auth.rate_limited == 2


def test_failed_logins_count_towards_the_limit_and_it_lifts_after_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(_auth, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    auth = Auth(tokens=parse_tokens(TOKENS))
    for _ in range(FAILURES_ALLOWED):
        assert auth.refused_for("10.0.0.1") == 0
        assert auth.login("wrong-" + "x" * 30, "10.0.0.1") is None
        now[0] += 1
    assert auth.failed_logins == FAILURES_ALLOWED
    assert auth.refused_for("10.0.0.1") == FAILURE_WINDOW - FAILURES_ALLOWED
    assert auth.refused_for("10.0.0.2") == 0
    now[0] += FAILURE_WINDOW - FAILURES_ALLOWED
    assert auth.refused_for("10.0.0.1") == 0
    assert auth.login(ALICE, "10.0.0.1") is not None


# --- /health and /metrics while the store is unreachable -----------------------------------------------


def until(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether `check()` comes true within `seconds` (the server lists in a thread of its own)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("max_age", [0, 0.05], ids=["listed-per-request", "listed-in-background"])
def test_health_and_metrics_are_honest_while_the_store_is_unreachable(
    tmp_path: Path, keyring: berth.Keyring, monkeypatch: pytest.MonkeyPatch, max_age: float
) -> None:
    def unreachable(self: berth.QuestionStore, prefix: str = "") -> Any:
        try:
            raise ConnectionRefusedError("connect to db.internal:5432 as app password=hunter2")
        except ConnectionRefusedError as exc:
            raise berth.BackendError("db.internal:5432 password=hunter2 refused", identity=IDENTITY) from exc

    auth = Auth(tokens=parse_tokens(TOKENS))
    with (
        serving(tmp_path / "down.db", keyring, auth, max_age=max_age) as server,
        httpx.Client(base_url=server.url, headers=bearer(ALICE)) as api,
    ):
        Park(server)("k", "Still waiting?")
        assert api.get("/health").json() == {"status": "ok"}
        assert "\nberth_store_up 1\n" in api.get("/metrics").text
        with monkeypatch.context() as broken:
            broken.setattr(berth.QuestionStore, "headers", unreachable)
            assert until(lambda: api.get("/health").status_code == 503)
            health = api.get("/health").json()
            assert health["status"] == "unavailable" and f"identity {IDENTITY!r}" in health["error"]
            assert "BackendError (ConnectionRefusedError)" in health["error"] and "hunter2" not in health["error"]
            down = api.get("/metrics")
            assert down.status_code == 200 and "\nberth_store_up 0\n" in down.text
            assert "berth_oldest_question_age_seconds" not in down.text and "berth_parked_runs" not in down.text
            assert "berth_answers_total{" in down.text  # this server's own counters still count
        assert until(lambda: api.get("/health").status_code == 200)
        up = api.get("/metrics").text
        assert "\nberth_store_up 1\n" in up and f'berth_oldest_question_age_seconds{{identity="{IDENTITY}"}}' in up


def test_a_listing_that_never_finishes_makes_the_figures_untrusted(monkeypatch: pytest.MonkeyPatch) -> None:
    store = berth.open_store("memory://", identity="ops")
    inbox = Inbox([Source("ops", store, berth.QuestionStore(store.backend, identity="ops"))], max_age=1)
    inbox.snapshot()
    assert inbox.trouble() is None
    later = time.monotonic() + 125
    monkeypatch.setattr(_inbox, "time", SimpleNamespace(monotonic=lambda: later))
    trouble = inbox.trouble()
    assert trouble is not None and "finished 125 s ago" in trouble
    store.close()


def test_the_addresses_remembered_for_the_limit_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_auth, "_FAILING_PEERS", 3)
    auth = Auth(tokens=parse_tokens(TOKENS))
    for n in range(FAILURES_ALLOWED):
        auth.failed("10.0.0.1", login=False)  # the one limited now
        auth.failed(f"10.1.0.{n}", login=False)
    assert len(auth._failures) == 3 and "10.1.0.9" in auth._failures and auth.failed_tokens == 2 * FAILURES_ALLOWED
    assert auth.refused_for("10.0.0.1") > 0  # the address still failing is the one kept
