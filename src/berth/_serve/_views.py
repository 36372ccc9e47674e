"""How the inbox shows things: template filters, the API's JSON documents, the metrics text."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from markupsafe import Markup, escape

import berth
from berth._format import ago, listing_doc, rfc3339, span
from berth._serve._auth import Auth
from berth._serve._inbox import Card, Inbox, Snapshot
from berth._text import visible, visible_parts

__all__ = [
    "FILTERS",
    "answer_doc",
    "card_id",
    "fields",
    "link",
    "markdown",
    "metrics_text",
    "question_doc",
    "run_doc",
    "shown",
    "tool_doc",
]

FOLD_CHARS = 2000
"""A string value longer than this is folded: its first lines shown, the whole a click away, never cut."""


def shown(text: object, lines: bool = False) -> Markup:
    """`text` as HTML a person reads: escaped, every control, format or invisible character a visible mark.

    The marks are `berth._text.visible`'s (`\\u202e`), the same as the command line's, each in a
    `<span class="ctl">` titled with the character's name; nothing is ever applied, so a bidi
    override cannot reorder what is drawn. `lines=True` keeps line breaks and tabs.
    """
    out: list[str] = []
    for piece, is_mark in visible_parts(str(text), lines=lines):
        if is_mark:
            name = unicodedata.name(chr(int(piece[2:], 16)), "control character")
            out.append(f'<span class="ctl" title="{escape(name.lower())}">{escape(piece)}</span>')
        else:
            out.append(str(escape(piece)))
    return Markup("".join(out))


def link(url: str) -> str | None:
    """`url` if it is an absolute http or https address a person can read as written, else None."""
    if not url or visible(url) != url or any(c.isspace() for c in url) or len(url) > 2048:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return url


def _anchor(url: str, text: Markup) -> str:
    return f'<a href="{escape(url)}" rel="noopener noreferrer nofollow" target="_blank">{text}</a>'


def linked(text: object) -> Markup:
    """`shown(text)`, or a link to it when it is an http(s) address (a run's label naming its PR or ticket)."""
    url = link(str(text))
    return Markup(_anchor(url, shown(url))) if url is not None else shown(text)


# The safe Markdown subset of descriptions: inline code, bold, italics, [text](http...) links and
# bare http(s) addresses; blocks are paragraphs, `-`/`*`/`1.` lists, `#` headings and ``` fences.
_INLINE = re.compile(
    r"`(?P<code>[^`\n]+)`"
    r"|\*\*(?P<bold>[^*\n]+)\*\*"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<href>[^)\s]+)\)"
    r"|(?P<url>https?://[^\s<>()\"']+[^\s<>()\"'.,;:!?])"
    r"|(?<![\w*])[*_](?P<em>[^*_\n]+)[*_](?![\w*])"
)
_LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|(?P<n>\d{1,9})[.)])\s+(?P<text>.*)$")
_HEADING = re.compile(r"^\s{0,3}(?P<level>#{1,6})\s+(?P<text>.*?)\s*#*\s*$")


def _inline(text: str) -> str:
    out: list[str] = []
    at = 0
    for m in _INLINE.finditer(text):
        out.append(shown(text[at : m.start()]))
        at = m.end()
        if m["code"] is not None:
            out.append(f"<code>{shown(m['code'])}</code>")
        elif m["bold"] is not None:
            out.append(f"<strong>{_inline(m['bold'])}</strong>")
        elif m["label"] is not None:
            url = link(m["href"])
            out.append(_anchor(url, Markup(_inline(m["label"]))) if url else shown(m.group()))
        elif m["url"] is not None:
            url = link(m["url"])
            out.append(_anchor(url, shown(url)) if url else shown(m.group()))
        else:
            out.append(f"<em>{_inline(m['em'])}</em>")
    out.append(shown(text[at:]))
    return "".join(out)


def markdown(text: str) -> Markup:
    """A description in a safe subset of Markdown, as HTML: no raw HTML, no images, links only to http(s).

    Everything is escaped and shown with visible marks (`shown`) before any markup is added.
    """
    html: list[str] = []
    paragraph: list[str] = []
    items: list[str] = []
    ordered = False
    lines = text.replace("\r\n", "\n").split("\n")

    def flush() -> None:
        nonlocal items
        if paragraph:
            html.append("<p>" + "<br>".join(_inline(line.strip()) for line in paragraph) + "</p>")
            paragraph.clear()
        if items:
            tag = "ol" if ordered else "ul"
            html.append(f"<{tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + f"</{tag}>")
            items = []

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            flush()
            code: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                code.append(lines[i])
                i += 1
            html.append(f"<pre><code>{shown(chr(10).join(code), lines=True)}</code></pre>")
        elif not line.strip():
            flush()
        elif (h := _HEADING.match(line)) is not None:
            flush()
            html.append(f'<p class="heading"><strong>{_inline(h["text"])}</strong></p>')
        elif (li := _LIST_ITEM.match(line)) is not None:
            if paragraph or (items and ordered != (li["n"] is not None)):
                flush()
            ordered = li["n"] is not None
            items.append(li["text"])
        elif items and line.startswith((" ", "\t")):
            items[-1] += " " + line.strip()
        else:
            if items:
                flush()
            paragraph.append(line)
        i += 1
    flush()
    return Markup("".join(html))


def fields(value: Any) -> Markup:
    """A JSON value (a tool call's arguments) as nested fields: objects as name/value rows, lists as
    numbered rows, strings as text that wraps (a long one folded: its start shown, the rest behind a
    click, never cut); every character shown with visible marks."""
    if isinstance(value, Mapping):
        if not value:
            return Markup('<span class="empty">{}</span>')
        rows = "".join(f'<div class="field"><dt>{shown(k)}</dt><dd>{fields(v)}</dd></div>' for k, v in value.items())
        return Markup(f'<dl class="fields">{rows}</dl>')
    if isinstance(value, (list, tuple)):
        if not value:
            return Markup('<span class="empty">[]</span>')
        rows = "".join(f"<li>{fields(v)}</li>" for v in value)
        return Markup(f'<ol class="items" start="0">{rows}</ol>')
    if isinstance(value, str):
        if len(value) > FOLD_CHARS:
            head = value[: FOLD_CHARS // 4]
            return Markup(
                f'<details class="fold"><summary><span class="str">{shown(head, lines=True)}</span>'
                f'<span class="more">… show all {len(value):,} characters</span></summary>'
                f'<span class="str">{shown(value, lines=True)}</span></details>'
            )
        return Markup(f'<span class="str">{shown(value, lines=True)}</span>')
    if value is None or isinstance(value, bool):
        return Markup(f'<span class="lit">{json.dumps(value)}</span>')
    return Markup(f'<span class="num">{escape(json.dumps(value))}</span>')


def card_id(identity: str, key: str) -> str:
    """A stable HTML id for the card of `key` (keys hold characters no id should)."""
    return "q-" + hashlib.sha256(f"{identity}\0{key}".encode()).hexdigest()[:16]


def countdown(deadline: datetime | None, now: datetime) -> str:
    """Time left before `deadline` (or how long it is past)."""
    if deadline is None:
        return "no deadline"
    left = (deadline - now).total_seconds()
    return f"{span(left)} left" if left >= 0 else f"expired {span(left)} ago"


def prompt_json(prompt: str) -> Markup | None:
    """The prompt as fields (`fields`) when it is a JSON object or list (pending tool calls), else None."""
    text = prompt.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return fields(value)


def version(card: Card, now: datetime | None = None) -> str:
    """What a live page compares to tell a card changed: the question, whether it is answered, and whether
    it has expired (so a page left open past a deadline takes the answer form away)."""
    state = ":answered" if card.answer is not None else ":open"
    return card.question.id + state + (":expired" if card.expired(now or datetime.now(timezone.utc)) else "")


FILTERS: dict[str, Callable[..., Any]] = {
    "rfc3339": rfc3339,
    "ago": ago,
    "countdown": countdown,
    "prompt_json": prompt_json,
    "shown": shown,
    "visible": visible,
    "linked": linked,
    "markdown": markdown,
    "fields": fields,
    "as_json": lambda value: json.dumps(value, indent=2, ensure_ascii=False, default=dict),
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
        "expired": card.expired(datetime.now(timezone.utc)),
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


def metrics_text(inbox: Inbox, auth: Auth, snap: Snapshot | None) -> str:
    """The inbox's figures in the Prometheus text exposition format (0.0.4).

    `snap` None: the stores cannot be listed now (or the last listing is too old), so
    `berth_store_up` is 0 and the figures read from the stores are left out rather than
    shown frozen; this server's own counters are still given.
    """
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: Sequence[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    ids = inbox.identities
    metric(
        "berth_store_up",
        "gauge",
        "1 when the stores were listed recently; 0: they cannot be (see /health), the figures from them are left out.",
        [("", 0 if snap is None else 1)],
    )
    if snap is not None:
        _store_figures(metric, ids, snap)
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
    if snap is not None:
        metric("berth_listing_seconds", "gauge", "How long the last listing of every header took.", [("", snap.took)])
    return "\n".join(lines) + "\n"


def _store_figures(
    metric: Callable[[str, str, str, Sequence[tuple[str, float]]], None], ids: Sequence[str], snap: Snapshot
) -> None:
    counts = snap.counts
    by_id = [(f'{{identity="{_label(i)}"}}', i) for i in ids]
    metric("berth_parked_runs", "gauge", "Envelopes parked.", [(lab, counts[i].parked) for lab, i in by_id])
    metric(
        "berth_open_questions",
        "gauge",
        "Questions asked and not yet consumed by a waker (answered ones included).",
        [(lab, counts[i].questions) for lab, i in by_id],
    )
    now = datetime.now(timezone.utc)
    oldest = []
    for lab, i in by_id:
        asked = counts[i].oldest_asked
        oldest.append((lab, max(0.0, (now - asked).total_seconds()) if asked else 0.0))
    metric("berth_oldest_question_age_seconds", "gauge", "Age of the oldest open question.", oldest)
    metric(
        "berth_expired_unswept",
        "gauge",
        "Envelopes past their deadline not yet removed by `berth sweep`.",
        [(lab, counts[i].expired) for lab, i in by_id],
    )
