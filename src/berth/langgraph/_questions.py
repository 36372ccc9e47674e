"""What both of the savers' I/O shells call, sync (the async one in a worker thread): the question store
beside the saver's store, an interrupt asked once, the keys of open questions, and the witness's check
of what a read did not see."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from berth._hitl import interrupt_question
from berth._questions import QuestionStore
from berth._store import Store

__all__ = ["ask_once", "asked_keys", "questions_over", "refuse_unseen"]


def questions_over(store: Store) -> QuestionStore:
    """The question store beside `store`: same backend, identity, sealer and clock."""
    return QuestionStore(store.backend, identity=store.identity, sealer=store.sealer, clock=store.now)


def ask_once(questions: QuestionStore, key: str, value: Any, deadline: datetime, question_id: str) -> None:
    """Ask, unless this very interrupt is already asked: one raised again (its branch re-run) keeps its answer.

    An interrupt's value in the Agent Inbox convention (a `HumanInterrupt`) is asked as a structured
    tool approval (`berth._hitl.interrupt_question`); any other value asks for free text.
    """
    asked = questions.pending(key)
    if asked is None or asked.id != question_id:
        prompt, accepts, tool = interrupt_question(getattr(value, "value", value))
        questions.ask(key, prompt, deadline=deadline, question_id=question_id, accepts=accepts, tool=tool)


def asked_keys(questions: QuestionStore, prefix: str, limit: int) -> list[str]:
    """The keys of up to `limit` open questions under `prefix`."""
    return [question.key for question, _ in itertools.islice(questions.list(prefix), limit)]


def refuse_unseen(store: Store, prefix: str, after: str, seen: frozenset[str], before: str | None = None) -> None:
    """With a witness: raise `IntegrityError` for a frame under `prefix`, sorting after `after` (and before
    `before`), that a read did not find and the witness saw parked and never leave (deleted behind berth's back).

    Each key the witness knows there that the read did not see is loaded: one that left (a
    claim, a delete, a sweep) or landed meanwhile passes; a missing one is refused by the load.
    """
    for key in store.frames.keys_after(prefix, after):  # none without a witness
        if key not in seen and (before is None or key < before):
            store.load(key, allow_expired=True)
