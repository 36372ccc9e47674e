"""Who may use the inbox: tokens, sessions, the trusted header, CSRF, loopback-only without authentication."""

from __future__ import annotations

import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import berth
from berth._cli import cli
from berth._serve import Auth, AuthError, is_loopback, parse_tokens
from tests.serve.conftest import ALICE, IDENTITY, Park, Server, serving

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "the page has no CSRF field"
    return found.group(1)


# --- configuration ---------------------------------------------------------------------------


A = secrets.token_urlsafe(32)
B = secrets.token_urlsafe(32)


def test_tokens_name_people() -> None:
    assert parse_tokens(f"alice:{A}, bob:{B}") == {A: "alice", B: "bob"}
    assert parse_tokens(A) == {A: "token-holder"}
    assert parse_tokens(None) == {} and parse_tokens("  ") == {}
    with pytest.raises(AuthError, match="both 'alice' and 'bob'"):
        parse_tokens(f"alice:{A},bob:{A}")


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("tiny-1", "shorter than 32"),
        ("t" * 16, "shorter than 32"),
        ("Ab3" + "x" * 13, "shorter than 32"),  # 16 characters: accepted before
        ("a" * 40, "fewer than 8 different"),
        ("ab" * 20, "fewer than 8 different"),
        ("password" * 4, "fewer than 8 different"),
        ("0123456789abcdef" * 2, "repeats a shorter piece"),
    ],
)
def test_weak_tokens_are_refused_with_how_to_make_one(token: str, why: str) -> None:
    with pytest.raises(AuthError, match=why) as refused:
        parse_tokens("alice:" + token)
    message = str(refused.value)
    assert "'alice'" in message and "secrets.token_urlsafe(32)" in message and token not in message
    assert "\n" not in message


def test_random_tokens_of_the_documented_recipes_are_accepted() -> None:
    for _ in range(200):
        for token in (secrets.token_urlsafe(32), secrets.token_hex(16), secrets.token_hex(24)):
            assert parse_tokens(token) == {token: "token-holder"}


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False)],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    auth = Auth()
    if loopback:
        auth.check_bind(host)
    else:
        with pytest.raises(AuthError, match="refusing to serve"):
            auth.check_bind(host)
    Auth(tokens=parse_tokens(A)).check_bind(host)
    Auth(trusted_header="X-Forwarded-User", forwarded_allow_ips="10.0.0.5").check_bind(host)


def test_the_command_refuses_to_serve_off_loopback_without_authentication(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BERTH_SERVE_TOKEN", raising=False)
    monkeypatch.setenv("BERTH_URL", f"sqlite:///{tmp_path}/b.db")
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "refusing to serve on 0.0.0.0 without authentication" in lines[0]
    assert "BERTH_SERVE_TOKEN" in lines[0] and "Traceback" not in result.output
    monkeypatch.setenv("BERTH_SERVE_TOKEN", "short")
    short = CliRunner().invoke(cli, ["serve"])
    assert short.exit_code == 2 and "shorter than 32" in short.output and "token_urlsafe" in short.output


def test_the_command_says_in_one_line_when_its_port_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_SERVE_TOKEN", raising=False)
    monkeypatch.setenv("BERTH_URL", f"sqlite:///{tmp_path}/b.db")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["serve", "--port", str(port)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], result.output


def test_serve_help_documents_everything() -> None:
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert result.exit_code == 0
    for word in (
        "--host",
        "--port",
        "--identity",
        "--trusted-header",
        "--forwarded-allow-ips",
        "--poll",
        "BERTH_SERVE_TOKEN",
        "/api/questions",
        "/metrics",
        "loopback",
    ):
        assert word in result.output, word


# --- sessions and CSRF over HTTP ---------------------------------------------------------------


def logged_in(server: Server, token: str = ALICE) -> httpx.Client:
    client = httpx.Client(base_url=server.url)
    form = client.get("/login")
    assert form.status_code == 200
    r = client.post("/login", data={"token": token, "csrf": csrf_of(form.text)})
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
    return client


def test_page_needs_a_login_and_the_login_form_needs_its_csrf_token(inbox: Server) -> None:
    r = httpx.get(inbox.url + "/")
    assert r.status_code == 303 and r.headers["location"] == "/login"
    deep = httpx.get(inbox.url + "/?prefix=a%2Fb")
    assert deep.headers["location"] == "/login?next=%2F%3Fprefix%3Da%252Fb"
    with httpx.Client(base_url=inbox.url) as client:
        form = client.get("/login", params={"next": "//evil.example/"})
        assert 'name="next" value="/"' in form.text  # never a redirect off this site
        done = client.post("/login", data={"token": ALICE, "csrf": csrf_of(form.text), "next": "https://evil.example"})
        assert done.status_code == 303 and done.headers["location"] == "/"
    with httpx.Client(base_url=inbox.url) as client:
        client.get("/login")
        forged = client.post("/login", data={"token": ALICE, "csrf": "guessed"})
        assert forged.status_code == 403 and "berth_session" not in forged.headers.get("set-cookie", "")
    assert httpx.get(inbox.url + "/inbox/live").status_code == 401


def test_answer_form_needs_the_session_csrf_token(inbox: Server, park: Park) -> None:
    key, q = park("csrf", "Ship it?")
    client = logged_in(inbox)
    page = client.get("/", params={"prefix": park.prefix})
    assert page.status_code == 200 and "Ship it?" in page.text
    form = {"identity": IDENTITY, "key": key, "question_id": q.id, "text": "yes", "choice": "respond"}
    assert client.post("/answer", data={**form, "csrf": "forged"}).status_code == 403
    assert inbox.questions[IDENTITY].answer(key) is None
    done = client.post("/answer", data={**form, "csrf": csrf_of(page.text)})
    assert done.status_code == 303
    client.close()
    answer = inbox.questions[IDENTITY].answer(key)
    assert answer is not None and answer.by == "alice"


def test_logout_ends_the_session_on_the_server(inbox: Server) -> None:
    client = logged_in(inbox)
    page = client.get("/")
    cookie = client.cookies["berth_session"]
    assert client.post("/logout", data={"csrf": csrf_of(page.text)}).status_code == 303
    replay = httpx.get(inbox.url + "/", cookies={"berth_session": cookie})
    assert replay.status_code == 303 and replay.headers["location"] == "/login"
    client.close()


# --- other modes -------------------------------------------------------------------------------


@pytest.fixture
def open_inbox(tmp_path: Path, keyring: berth.Keyring) -> Iterator[Server]:
    """An inbox without authentication: loopback only, answers recorded as the local person."""
    with serving(tmp_path / "open.db", keyring, Auth(local_person="kim")) as server:
        yield server


@pytest.fixture
def proxied_inbox(tmp_path: Path, keyring: berth.Keyring) -> Iterator[Server]:
    """An inbox behind an authenticating proxy that sets X-Forwarded-User."""
    auth = Auth(trusted_header="X-Forwarded-User", forwarded_allow_ips="127.0.0.1")
    with serving(tmp_path / "proxied.db", keyring, auth) as server:
        yield server


def test_without_authentication_only_loopback_names_are_answered(open_inbox: Server) -> None:
    key, q = Park(open_inbox)("k", "Open?")
    assert httpx.get(open_inbox.url + "/").status_code == 200
    rebound = httpx.get(open_inbox.url + "/", headers={"Host": "evil.example:8470"})
    assert rebound.status_code == 421  # a DNS-rebinding page cannot read or answer
    r = httpx.post(open_inbox.url + "/api/answers", json={"key": key, "question_id": q.id, "text": "ok"})
    assert r.status_code == 201 and r.json()["by"] == "kim"
    assert httpx.post(open_inbox.url + "/answer", data={"key": key, "csrf": ""}).status_code == 403


def test_trusted_header_names_the_person(proxied_inbox: Server) -> None:
    key, q = Park(proxied_inbox)("k", "Proxied?")
    doc = {"key": key, "question_id": q.id, "text": "fine"}
    assert httpx.get(proxied_inbox.url + "/api/questions").status_code == 401
    assert httpx.get(proxied_inbox.url + "/").status_code == 401
    page = httpx.get(proxied_inbox.url + "/", headers={"X-Forwarded-User": "dana@example.com"})
    assert page.status_code == 200 and "dana@example.com" in page.text
    assert httpx.post(proxied_inbox.url + "/api/answers", json=doc).status_code == 401
    r = httpx.post(proxied_inbox.url + "/api/answers", json=doc, headers={"X-Forwarded-User": "dana@example.com"})
    assert r.status_code == 201 and r.json()["by"] == "dana@example.com"


def test_live_fragment_is_304_until_something_changes(inbox: Server, park: Park) -> None:
    park("live-1", "First?")
    client = logged_in(inbox)
    first = client.get("/inbox/live", params={"prefix": park.prefix})
    assert first.status_code == 200 and "First?" in first.text and "<html" not in first.text
    etag = first.headers["etag"]
    same = client.get("/inbox/live", params={"prefix": park.prefix}, headers={"If-None-Match": etag})
    assert same.status_code == 304
    park("live-2", "Second?")
    changed = client.get("/inbox/live", params={"prefix": park.prefix}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and "Second?" in changed.text
    client.close()
