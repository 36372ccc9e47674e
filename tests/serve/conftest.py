"""The inbox under test: a real uvicorn server on a free loopback port, over a sealed SQLite store.

`inbox` is one server per test session (token auth: alice and bob); tests arrange
questions through `Park`, which writes to the same store files the server reads,
under a key prefix of their own, so they never see each other's questions.
`serving(...)` starts a short-lived server with other settings (no auth, trusted header).
Every request comes from 127.0.0.1, so wrong tokens sent to the shared server count towards
its per-address limit (10 a minute, then 429): test wrong tokens in bulk on a server of their own.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth
from tests._net import free_port, wait_http

pytest.importorskip("starlette", reason="the serve extra is not installed: ./dev test installs it")

from berth._serve import Auth, Source, build_app  # noqa: E402

IDENTITY = "pr-bot"
OTHER = "support"
ALICE = "alice-" + secrets.token_urlsafe(32)
BOB = "bob-" + secrets.token_urlsafe(32)
TOKENS = f"alice:{ALICE},bob:{BOB}"


@dataclass
class Server:
    """A running inbox: its base URL and the stores it serves."""

    url: str
    auth: Auth
    stores: Mapping[str, berth.Store]
    questions: Mapping[str, berth.QuestionStore]


@contextmanager
def serving(
    db: Path,
    keyring: berth.Keyring,
    auth: Auth,
    *,
    identities: tuple[str, ...] = (IDENTITY,),
    poll_seconds: float = 0.3,
    max_age: float = 0,
) -> Iterator[Server]:
    """Run an inbox over the SQLite file `db` on a free port until the block ends."""
    import uvicorn

    url = f"sqlite:///{db}"
    sealer = berth.AesGcmSealer(keyring)
    sources = [
        Source(
            i,
            berth.open_store(url, identity=i, sealer=berth.PlaintextSealer()),
            berth.open_questions(url, identity=i, sealer=sealer),
        )
        for i in identities
    ]
    app = build_app(sources, auth, poll_seconds=poll_seconds, max_age=max_age)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    stores = {i: berth.open_store(url, identity=i, sealer=sealer) for i in identities}
    questions = {i: berth.open_questions(url, identity=i, sealer=sealer) for i in identities}
    try:
        assert wait_http(base + "/health"), "the inbox did not start"
        yield Server(base, auth, stores, questions)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        for store in stores.values():
            store.close()
        for question_store in questions.values():
            question_store.close()


@pytest.fixture(scope="session")
def keyring() -> berth.Keyring:
    """The keyring that seals the inbox's store."""
    return berth.Keyring.generate()


@pytest.fixture(scope="session")
def inbox(tmp_path_factory: pytest.TempPathFactory, keyring: berth.Keyring) -> Iterator[Server]:
    """The session's inbox: two identities, tokens for alice and bob."""
    from berth._serve import parse_tokens

    db = tmp_path_factory.mktemp("inbox") / "berth.db"
    auth = Auth(tokens=parse_tokens(TOKENS))
    with serving(db, keyring, auth, identities=(IDENTITY, OTHER)) as server:
        yield server


class Park:
    """Parks runs with questions in the inbox's store, under a prefix unique to one test."""

    def __init__(self, server: Server):
        self.server = server
        self.prefix = f"t{secrets.token_hex(4)}/"

    def __call__(
        self,
        name: str,
        prompt: str,
        *,
        identity: str = IDENTITY,
        labels: dict[str, str] | None = None,
        deadline: timedelta = timedelta(hours=2),
        accepts: tuple[str, ...] = (),
        tool: berth.ToolRequest | None = None,
    ) -> tuple[str, berth.Question]:
        """Park a run under prefix+name asking `prompt` (accepting `accepts`, about `tool`); returns (key, question)."""
        key = self.prefix + name
        coordinator = berth.Coordinator(self.server.stores[identity], self.server.questions[identity])
        env = berth.Envelope(
            provider="anthropic",
            model="claude",
            run_id="run-" + secrets.token_hex(3),
            provider_state={"secret": "SEALED-STATE-" + name},
            labels=labels or {},
            deadline=datetime.now(timezone.utc) + deadline,
        )
        coordinator.suspend(key, env, question=prompt)
        question = self.server.questions[identity].pending(key)
        assert question is not None
        if accepts or tool is not None:  # the same question, declaring its decisions (as the integrations ask)
            question = self.server.questions[identity].ask(
                key,
                prompt,
                run_id=env.run_id,
                question_id=question.id,
                deadline=env.deadline,
                accepts=accepts,
                tool=tool,
            )
        return key, question

    def ask_again(self, key: str, prompt: str, *, identity: str = IDENTITY) -> berth.Question:
        """Supersede the question at `key` with a new one (as a re-suspended run does)."""
        listing = next(i for i in self.server.stores[identity].list(key) if i.key == key)
        return self.server.questions[identity].ask(key, prompt, run_id=listing.run_id, deadline=listing.deadline)


@pytest.fixture
def park(inbox: Server) -> Park:
    """A parker with a prefix of this test's own."""
    return Park(inbox)


def bearer(token: str) -> dict[str, Any]:
    """Headers for an API call as the holder of `token`."""
    return {"Authorization": f"Bearer {token}"}
