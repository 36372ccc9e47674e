"""How the inbox shows things: template filters, the API's JSON documents, the metrics text."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import berth
from berth._cli._output import ago, listing_doc, rfc3339, span
from berth._serve._auth import Auth
from berth._serve._inbox import Card, Inbox, Snapshot

__all__ = ["FILTERS", "answer_doc", "card_id", "metrics_text", "question_doc", "run_doc", "tool_doc"]


def card_id(identity: str, key: str) -> str:
    """A stable HTML id for the card of `key` (keys hold characters no id should)."""
    return "q-" + hashlib.sha256(f"{identity}\0{key}".encode()).hexdigest()[:16]


def countdown(deadline: datetime | None, now: datetime) -> str:
    """Time left before `deadline` (or how long it is past)."""
    if deadline is None:
        return "no deadline"
    left = (deadline - now).total_seconds()
    return f"{span(left)} left" if left >= 0 else f"expired {span(left)} ago"


def prompt_json(prompt: str) -> str | None:
    """The prompt pretty-printed when it is a JSON object or list (pending tool calls), else None."""
    text = prompt.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def version(card: Card) -> str:
    """What a live page compares to tell a card changed: the question and whether it is answered."""
    return card.question.id + (":answered" if card.answer is not None else ":open")


FILTERS: dict[str, Callable[..., Any]] = {
    "rfc3339": rfc3339,
    "ago": ago,
    "countdown": countdown,
    "prompt_json": prompt_json,
    "card_id": lambda card: card_id(card.item.identity, card.item.key),
    "version": version,
}


def question_doc(card: Card) -> dict[str, Any]:
    """One open question as `GET /api/questions` returns it."""
    q, a = card.question, card.answer
    return {
        "identity": card.item.identity,
        "key": q.key,
        "question_id": q.id,
        "prompt": q.prompt,
        "run_id": q.run_id,
        "asked_at": rfc3339(q.asked_at),
        "deadline": rfc3339(card.item.deadline),
        "labels": dict(card.item.labels),
        "decisions": list(card.choices),
        "choices": list(card.choices),
        "tool": tool_doc(q.tool),
        "answered": a is not None,
        "answered_by": None if a is None else a.by,
        "answered_at": None if a is None else rfc3339(a.answered_at),
    }


def tool_doc(tool: berth.ToolRequest | None) -> dict[str, Any] | None:
    """The tool call a question is about, as the API shows it (None when it is about none)."""
    if tool is None:
        return None
    return {
        "name": tool.name,
        "arguments": dict(tool.arguments),
        "agent": tool.agent,
        "description": tool.description,
        "call_id": tool.call_id,
    }


def answer_doc(card: Card, answer: berth.Answer) -> dict[str, Any]:
    """An answer just recorded, as `POST /api/answers` returns it."""
    return {
        "identity": card.item.identity,
        "key": card.question.key,
        "question_id": answer.question_id,
        "decision": answer.decision.value,
        "text": answer.text,
        "arguments": None if answer.arguments is None else dict(answer.arguments),
        "by": answer.by,
        "answered_at": rfc3339(answer.answered_at),
    }


def run_doc(identity: str, item: berth.Listing) -> dict[str, Any]:
    """A parked run's header, as `GET /api/runs` returns it (the CLI's `--json` document and the identity)."""
    return {"identity": identity, **listing_doc(item)}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(inbox: Inbox, auth: Auth, snap: Snapshot) -> str:
    """The inbox's figures in the Prometheus text exposition format (0.0.4)."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: Sequence[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    ids = inbox.identities
    counts = snap.counts
    by_id = [(f'{{identity="{_label(i)}"}}', i) for i in ids]
    metric("berth_parked_runs", "gauge", "Envelopes parked.", [(lab, counts[i].parked) for lab, i in by_id])
    metric(
        "berth_open_questions",
        "gauge",
        "Questions asked and not yet consumed by a waker (answered ones included).",
        [(lab, counts[i].questions) for lab, i in by_id],
    )
    oldest = []
    for lab, i in by_id:
        asked = counts[i].oldest_asked
        oldest.append((lab, max(0.0, (snap.taken_at - asked).total_seconds()) if asked else 0.0))
    metric("berth_oldest_question_age_seconds", "gauge", "Age of the oldest open question.", oldest)
    metric(
        "berth_expired_unswept",
        "gauge",
        "Envelopes past their deadline not yet removed by `berth sweep`.",
        [(lab, counts[i].expired) for lab, i in by_id],
    )
    answers = [
        (f'{{identity="{_label(i)}",via="{via}"}}', inbox.answers_given.get((i, via), 0))
        for i in ids
        for via in ("page", "api")
    ]
    metric("berth_answers_total", "counter", "Answers recorded by this server.", answers)
    metric("berth_failed_logins_total", "counter", "Login attempts with a wrong token.", [("", auth.failed_logins)])
    metric(
        "berth_failed_tokens_total", "counter", "API requests with a wrong bearer token.", [("", auth.failed_tokens)]
    )
    metric(
        "berth_rate_limited_total",
        "counter",
        "Tokens refused unchecked (429): too many wrong ones from one client address.",
        [("", auth.rate_limited)],
    )
    metric("berth_listing_seconds", "gauge", "How long the last listing of every header took.", [("", snap.took)])
    return "\n".join(lines) + "\n"
