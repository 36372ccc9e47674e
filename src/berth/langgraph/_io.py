# generated from src/berth/langgraph/_aio_io.py by scripts/twin.py — do not edit: change the source and run the script
"""`SaverIO`: the savers' plans' steps (`SaverSteps`), over a `berth.Store`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from berth._envelope import Envelope
from berth._errors import Expired, TokenMismatch
from berth._hitl import interrupt_question
from berth._questions import QuestionStore
from berth._store import Listing, Parked, Store
from berth._token import Token
from berth.langgraph._questions import refuse_unseen

__all__ = ["SaverIO"]


class SaverIO:
    """The store calls a saver's plans make, over a `berth.Store`."""

    def __init__(self, store: Store):
        self.store = store
        self.questions = QuestionStore(store.backend, identity=store.identity, sealer=store.sealer, clock=store.now)
        """The question store beside `store`: same backend, identity, sealer and clock."""

    def ask(self, key: str, value: Any, deadline: datetime, question_id: str) -> None:
        """Ask, unless this very interrupt is already asked: one raised again (its branch re-run) keeps its answer.

        An interrupt's value in the Agent Inbox convention (a `HumanInterrupt`) is asked as a structured
        tool approval (`berth._hitl.interrupt_question`); any other value asks for free text.
        """
        asked = self.questions.pending(key)
        if asked is None or asked.id != question_id:
            prompt, accepts, tool = interrupt_question(getattr(value, "value", value))
            self.questions.ask(key, prompt, deadline=deadline, question_id=question_id, accepts=accepts, tool=tool)

    def consume(self, key: str, question_id: str) -> None:
        self.questions.consume(key, question_id)

    def asked(self, prefix: str, limit: int) -> list[str]:
        """The keys of up to `limit` open questions under `prefix` (the listing read no further)."""
        keys: list[str] = []
        if limit <= 0:
            return keys
        for question, _ in self.questions.list(prefix):
            keys.append(question.key)
            if len(keys) >= limit:
                break
        return keys

    def exists(self, key: str) -> bool:
        return self.store.load(key, allow_expired=True) is not None

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def clear_expired(self, key: str) -> None:
        try:
            self.store.load(key)
        except Expired as exc:
            if exc.token is not None:
                self.delete(key, exc.token)

    def heads(self, prefix: str, limit: int | None = None, reverse: bool = False) -> list[Listing]:
        return [item for item in self.store.list(prefix, limit=limit, reverse=reverse)]

    def unseen(self, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
        refuse_unseen(self.store, prefix, after, seen, before)

    def load(self, key: str) -> Parked | None:
        return self.store.load(key)

    def load_many(self, keys: Sequence[str]) -> list[Parked | None]:
        return self.store.load_many(keys) if keys else []

    def frames(
        self, prefix: str, limit: int | None = None, reverse: bool = False, before: str | None = None
    ) -> list[tuple[str, Parked]]:
        return [row for row in self.store.load_prefix(prefix, limit=limit, reverse=reverse, before=before)]

    def last_key(self, prefix: str, before: str | None) -> str | None:
        found = self.store.load_prefix(prefix, limit=1, reverse=True, before=before, allow_expired=True)
        return next(iter([key for key, _ in found]), None)

    def save(self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None) -> Token:
        return self.store.save(key, envelope, if_absent=if_absent, if_match=if_match)

    def delete(self, key: str, token: Token) -> None:
        try:
            self.store.delete(key, token)
        except TokenMismatch:  # re-saved or removed meanwhile: what is there now stays
            pass

    def delete_prefix(self, prefix: str) -> int:
        return self.store.delete_prefix(prefix)
