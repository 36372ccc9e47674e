"""`AsyncSaverIO`: the savers' plans' steps (`SaverSteps`), awaited over a `berth.aio.AsyncStore`.

The source of `berth/langgraph/_io.py` (`SaverIO`, over a `berth.Store`), which `scripts/twin.py`
generates from it: change this module and run the script. The question store beside the saver's is
awaited too (`berth.aio.AsyncQuestionStore` over the same backend), and so is a witnessed read's check of
what it did not see (the witness's key listing).
"""  # twin: sync """`SaverIO`: the savers' plans' steps (`SaverSteps`), over a `berth.Store`."""

from __future__ import annotations

import asyncio  # twin: sync import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from berth._aio_questions import AsyncQuestionStore
from berth._aio_store import AsyncStore
from berth._envelope import Envelope
from berth._errors import Expired, TokenMismatch
from berth._hitl import interrupt_question
from berth._store import Listing, Parked
from berth._token import Token
from berth.langgraph._questions import arefuse_unseen  # twin: sync from berth.langgraph._questions import refuse_unseen

__all__ = ["AsyncSaverIO"]


class AsyncSaverIO:
    """The store calls a saver's plans make, over a `berth.aio.AsyncStore`."""

    def __init__(self, store: AsyncStore):
        self.store = store
        self.questions = AsyncQuestionStore(
            store.backend, identity=store.identity, sealer=store.sealer, clock=store.now
        )
        """The question store beside `store`: same backend, identity, sealer and clock."""

    async def ask(self, key: str, value: Any, deadline: datetime, question_id: str) -> None:
        """Ask, unless this very interrupt is already asked: one raised again (its branch re-run) keeps its answer.

        An interrupt's value in the Agent Inbox convention (a `HumanInterrupt`) is asked as a structured
        tool approval (`berth._hitl.interrupt_question`); any other value asks for free text.
        """
        asked = await self.questions.pending(key)
        if asked is None or asked.id != question_id:
            prompt, accepts, tool = interrupt_question(getattr(value, "value", value))
            await self.questions.ask(
                key, prompt, deadline=deadline, question_id=question_id, accepts=accepts, tool=tool
            )

    async def consume(self, key: str, question_id: str) -> None:
        await self.questions.consume(key, question_id)

    async def asked(self, prefix: str, limit: int) -> list[str]:
        """The keys of up to `limit` open questions under `prefix` (the listing read no further)."""
        keys: list[str] = []
        if limit <= 0:
            return keys
        async for question, _ in self.questions.list(prefix):
            keys.append(question.key)
            if len(keys) >= limit:
                break
        return keys

    async def exists(self, key: str) -> bool:
        return await self.store.load(key, allow_expired=True) is not None

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # twin: sync time.sleep(seconds)

    async def clear_expired(self, key: str) -> None:
        try:
            await self.store.load(key)
        except Expired as exc:
            if exc.token is not None:
                await self.delete(key, exc.token)

    async def heads(self, prefix: str, limit: int | None = None, reverse: bool = False) -> list[Listing]:
        return [item async for item in self.store.list(prefix, limit=limit, reverse=reverse)]

    async def unseen(self, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
        await arefuse_unseen(self.store, prefix, after, seen, before)  # twin: async-only
        # twin: sync refuse_unseen(self.store, prefix, after, seen, before)

    async def load(self, key: str) -> Parked | None:
        return await self.store.load(key)

    async def load_many(self, keys: Sequence[str]) -> list[Parked | None]:
        return await self.store.load_many(keys) if keys else []

    async def frames(
        self, prefix: str, limit: int | None = None, reverse: bool = False, before: str | None = None
    ) -> list[tuple[str, Parked]]:
        return [row async for row in self.store.load_prefix(prefix, limit=limit, reverse=reverse, before=before)]

    async def last_key(self, prefix: str, before: str | None) -> str | None:
        found = self.store.load_prefix(prefix, limit=1, reverse=True, before=before, allow_expired=True)
        return next(iter([key async for key, _ in found]), None)

    async def save(
        self, key: str, envelope: Envelope, *, if_absent: bool = False, if_match: Token | None = None
    ) -> Token:
        return await self.store.save(key, envelope, if_absent=if_absent, if_match=if_match)

    async def delete(self, key: str, token: Token) -> None:
        try:
            await self.store.delete(key, token)
        except TokenMismatch:  # re-saved or removed meanwhile: what is there now stays
            pass

    async def delete_prefix(self, prefix: str) -> int:
        return await self.store.delete_prefix(prefix)
