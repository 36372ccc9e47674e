# generated from src/berth/langgraph/_aio_io.py by scripts/twin.py — do not edit: change the source and run the script
"""`SaverIO`: the savers' plans' steps (`SaverSteps`), over a `berth.Store`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from berth._envelope import Envelope
from berth._errors import Expired, TokenMismatch
from berth._store import Listing, Parked, Store
from berth._token import Token
from berth.langgraph._questions import ask_once, asked_keys, questions_over, refuse_unseen

__all__ = ["SaverIO"]


class SaverIO:
    """The store calls a saver's plans make, over a `berth.Store`."""

    def __init__(self, store: Store):
        self.store = store
        self.questions = questions_over(store)

    def ask(self, key: str, value: Any, deadline: datetime, question_id: str) -> None:
        ask_once(self.questions, key, value, deadline, question_id)

    def consume(self, key: str, question_id: str) -> None:
        self.questions.consume(key, question_id)

    def asked(self, prefix: str, limit: int) -> list[str]:
        return asked_keys(self.questions, prefix, limit)

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
