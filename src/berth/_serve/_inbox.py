"""What the inbox shows and does, without HTTP: open questions from headers, one page opened, answers.

A snapshot lists the cleartext headers of every question record (no keys
needed) and is shared by every request for a short while, so a page polled by
many browsers costs one listing per refresh, not one per request; a stale one is
served while a background thread lists afresh. The headers of every parked run
(for counts, and the labels of the runs questions are about) are listed less
often; runs asked about since are looked up one key at a time. Only the questions on the page being shown are
opened (their prompts are sealed). Envelope state is never opened at all: the
inbox holds the envelope store with a plaintext sealer, which can list headers
and nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType

import berth
from berth._errors import where

__all__ = ["RECENT", "SORTS", "Answered", "Card", "Given", "Inbox", "Item", "Page", "Refused", "Snapshot", "Source"]

audit = logging.getLogger("berth.serve.audit")

CHOICES_LABEL = "berth.choices"
"""Envelope label naming the structured answers a question offers: `approve`, `reject`, `respond`."""

KNOWN_CHOICES = ("approve", "reject", "respond")
SORTS = ("newest", "deadline")
"""How a page may order open questions: newest first, or the nearest deadline first (none last)."""
_EMPTY: Mapping[str, str] = MappingProxyType({})
_LOOKUPS = 200  # runs looked up one by one per refresh; more wait for the next full listing
STALE_AFTER = 60.0  # seconds after which a listing that has not finished makes the figures untrustworthy
_ANSWER_LOCKS = 64  # answers to one key are taken one at a time (keys share these locks by hash)


@dataclass
class Source:
    """One identity the inbox serves: its envelope store (headers only) and its question store."""

    identity: str
    store: berth.Store
    questions: berth.QuestionStore


@dataclass(frozen=True, slots=True)
class Item:
    """One open question as the headers tell it: no prompt, no answer."""

    identity: str
    key: str
    run_id: str
    asked_at: datetime
    deadline: datetime | None
    labels: Mapping[str, str]
    token: str


@dataclass(frozen=True, slots=True)
class Card:
    """One open question, opened: what a person sees and answers."""

    item: Item
    question: berth.Question
    answer: berth.Answer | None

    @property
    def choices(self) -> tuple[str, ...]:
        """The decisions an answer may make: those the question declares (`berth.Question.accepts`), else
        those the run's `berth.choices` label names, else a free-text response only."""
        if self.question.accepts:
            return tuple(d.value for d in self.question.accepts)
        raw = self.item.labels.get(CHOICES_LABEL, "")
        picked = tuple(c for c in (p.strip() for p in raw.split(",")) if c in KNOWN_CHOICES)
        return picked or ("respond",)

    def expired(self, now: datetime) -> bool:
        """Whether the question's deadline passed by `now`: its run never resumes, so it is not answerable."""
        return self.item.deadline is not None and now > self.item.deadline

    @property
    def shown_labels(self) -> list[tuple[str, str]]:
        """The run's labels for people to read: sorted, without berth's own (`berth.*`)."""
        return sorted((k, v) for k, v in self.item.labels.items() if not k.startswith("berth."))


@dataclass(frozen=True, slots=True)
class Given:
    """An answer this server recorded: who decided what, when, about which question (never the text)."""

    identity: str
    key: str
    question_id: str
    asked_at: datetime
    deadline: datetime | None
    decision: str
    by: str
    answered_at: datetime

    def fate(self, snapshot: Snapshot) -> str:
        """What became of it, as `snapshot` tells: `waiting` (for its run to wake and read it), `taken` (the
        question left the inbox: its run read the answer, or was removed), `asked-again` (the run asked a new
        question since) or `expired` (its deadline passed first: the run never resumes)."""
        item = next((i for i in snapshot.items if i.identity == self.identity and i.key == self.key), None)
        if item is None:
            return "taken"
        if item.asked_at != self.asked_at:
            return "asked-again"
        if self.deadline is not None and snapshot.taken_at > self.deadline:
            return "expired"
        return "waiting"


RECENT = 50
"""How many answers given through this server the page lists with what became of them (kept in memory)."""


@dataclass(frozen=True, slots=True)
class Counts:
    """Per-identity figures for the page's tabs and /metrics."""

    parked: int = 0
    questions: int = 0
    expired: int = 0
    oldest_asked: datetime | None = None


@dataclass(frozen=True)
class Snapshot:
    """Every open question (newest first) and per-identity counts, from headers, at one moment."""

    taken_at: datetime
    items: Sequence[Item]
    counts: Mapping[str, Counts]
    took: float = 0.0
    labels: Sequence[tuple[str, str]] = field(default_factory=tuple)


@dataclass(frozen=True)
class Page:
    """One page of open questions, opened, with where it sits in the filtered whole."""

    cards: Sequence[Card]
    total: int
    offset: int
    limit: int
    snapshot: Snapshot

    @property
    def next_offset(self) -> int | None:
        """The offset of the next page, or None on the last."""
        return self.offset + self.limit if self.offset + self.limit < self.total else None

    @property
    def prev_offset(self) -> int | None:
        """The offset of the previous page, or None on the first."""
        return max(0, self.offset - self.limit) if self.offset > 0 else None


class Refused(Exception):
    """An answer not recorded: `status` 404 (nothing pending), 409 (superseded or already answered) or 410 (expired)."""

    def __init__(self, status: int, message: str, card: Card | None = None):
        super().__init__(message)
        self.status = status
        self.card = card


@dataclass(frozen=True)
class Answered:
    """An answer just recorded, and the card it belongs to."""

    answer: berth.Answer
    card: Card


def _parent(key: str) -> str:
    return key.rpartition("/")[0]


def _run_of(store: berth.Store, key: str) -> berth.Listing | None:
    """The run a question under `key` is about: the one parked at `key`, else at its parent key.

    Integrations that ask one question per pending tool call ask them under
    `<key>/call-<i>`; those questions show the labels (and `berth.choices`) of the run at `<key>`.
    """
    for candidate in (key, _parent(key)):
        if candidate:
            run = next((x for x in store.list(candidate) if x.key == candidate), None)
            if run is not None:
                return run
    return None


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class _Runs:
    """One identity's parked runs from one full listing: counts, and labels and deadline per question key."""

    parked: int
    expired: int
    runs: dict[str, tuple[Mapping[str, str], datetime | None, str]]  # key: labels, deadline, question token
    taken: float
    took: float


class Inbox:
    """The inbox's data side over one or more identities; every method is blocking (run it in a thread).

    Args:
        sources: one per identity.
        max_age: seconds one listing of the question headers serves every request; a stale
            snapshot is still served while a background thread lists afresh. 0: every request
            lists synchronously (tests).
        runs_max_age: seconds one listing of every parked run's header serves (for counts and the
            labels of questions); questions asked since are looked up one key at a time.
    """

    def __init__(self, sources: Iterable[Source], *, max_age: float = 1.0, runs_max_age: float = 30.0):
        self.sources = {s.identity: s for s in sources}
        if not self.sources:
            raise ValueError("the inbox needs at least one identity")
        self.max_age = max_age
        self.runs_max_age = runs_max_age
        self.answers_given: dict[tuple[str, str], int] = {}
        self.given: deque[Given] = deque(maxlen=RECENT)
        self._snapshot: Snapshot | None = None
        self._runs: dict[str, _Runs] = {}
        self._taken = 0.0
        self._listed_at: float | None = None  # when the last listing succeeded
        self._failure: str | None = None  # why the last listing failed, if it did
        self._refreshing = False
        self._lock = threading.Lock()  # the current snapshot and counters: held for moments
        self._refresh_lock = threading.Lock()  # one listing at a time: held for as long as it takes
        self._answer_locks = [threading.Lock() for _ in range(_ANSWER_LOCKS)]

    @property
    def identities(self) -> list[str]:
        """The identities served, in the order given."""
        return list(self.sources)

    def close(self) -> None:
        """Close every store (after a listing in progress ends)."""
        with self._refresh_lock:
            for s in self.sources.values():
                s.questions.close()
                s.store.close()

    # --- the snapshot ----------------------------------------------------------------------

    def snapshot(self, *, fresh: bool = False) -> Snapshot:
        """The current snapshot; one older than `max_age` (or five times its own cost) is refreshed in the background.

        The first call, `fresh=True`, and `max_age=0` list synchronously.
        """
        with self._lock:
            snap = self._snapshot
            sync = fresh or snap is None or self.max_age <= 0
            if snap is not None and not sync and not self._refreshing:
                if time.monotonic() - self._taken > max(self.max_age, 5 * snap.took):
                    self._refreshing = True
                    threading.Thread(target=self._background, name="berth-inbox-refresh", daemon=True).start()
        if sync or snap is None:
            return self._refresh()
        return snap

    def invalidate(self) -> None:
        """Make the next request start a fresh listing."""
        with self._lock:
            self._taken = float("-inf")

    def trouble(self) -> str | None:
        """Why the figures cannot be trusted now, in one line without secrets; None when they can.

        The last listing failed (the store is unreachable, say), or none has finished for longer than
        `STALE_AFTER` seconds (or ten times `max_age`, or ten listings' time): the snapshot is frozen.
        """
        with self._lock:
            failure, listed_at, snap = self._failure, self._listed_at, self._snapshot
        if failure is not None:
            return failure
        if listed_at is None or snap is None:
            return None
        age = time.monotonic() - listed_at
        if age > max(STALE_AFTER, 10 * self.max_age, 10 * snap.took):
            return f"the last listing of the stores finished {age:.0f} s ago: one is stuck or failing"
        return None

    def _refresh(self) -> Snapshot:
        with self._refresh_lock:
            started = time.monotonic()
            try:
                snap = self._take()
            except Exception as exc:
                identity = getattr(exc, "identity", None)
                cause = f" ({type(exc.__cause__).__name__})" if exc.__cause__ is not None else ""
                with self._lock:  # the exception's class, never its text: that may name hosts or credentials
                    self._failure = (
                        f"listing the store{f' of identity {identity!r}' if identity else 's'} failed at "
                        f"{_utcnow().strftime('%H:%M:%S')} UTC: {type(exc).__name__}{cause}"
                    )
                raise
            done = time.monotonic()
            snap = Snapshot(snap.taken_at, snap.items, snap.counts, done - started, snap.labels)
            with self._lock:
                self._snapshot, self._taken = snap, done
                self._listed_at, self._failure = done, None
            return snap

    def _background(self) -> None:
        try:
            self._refresh()
        except Exception as exc:  # keep serving the last snapshot; try again after max_age
            logging.getLogger("berth.serve").warning("berth serve: listing failed, showing older data: %s", exc)
            with self._lock:
                self._taken = time.monotonic()
        finally:
            with self._lock:
                self._refreshing = False

    def _take(self) -> Snapshot:
        now = _utcnow()
        items: list[Item] = []
        counts: dict[str, Counts] = {}
        labels: set[tuple[str, str]] = set()
        for identity, source in self.sources.items():
            heads = {h.key: h for h in source.questions.headers()}
            runs = self._runs.get(identity)
            if (
                runs is None
                or self.max_age <= 0
                or time.monotonic() - runs.taken > max(self.runs_max_age, 5 * runs.took)
            ):
                runs = self._list_runs(source, heads, now)
                self._runs[identity] = runs
            else:
                self._look_up_new(source, heads, runs)
            oldest: datetime | None = None
            for key, h in heads.items():
                lab, run_deadline, _ = runs.runs.get(key, (_EMPTY, None, ""))
                labels.update((k, v) for k, v in lab.items() if not k.startswith("berth."))
                deadline = h.deadline if h.deadline is not None else run_deadline
                items.append(Item(identity, key, h.run_id, h.created_at, deadline, lab, str(h.token)))
                if oldest is None or h.created_at < oldest:
                    oldest = h.created_at
            counts[identity] = Counts(runs.parked, len(heads), runs.expired, oldest)
        items.sort(key=lambda i: (i.asked_at, i.identity, i.key), reverse=True)
        return Snapshot(now, tuple(items), counts, 0.0, tuple(sorted(labels)))

    @staticmethod
    def _list_runs(source: Source, heads: Mapping[str, berth.Listing], now: datetime) -> _Runs:
        started = time.monotonic()
        parked = expired = 0
        wanted = set(heads) | {_parent(k) for k in heads}
        found: dict[str, tuple[Mapping[str, str], datetime | None]] = {}
        for listing in source.store.list():
            parked += 1
            if listing.deadline is not None and now > listing.deadline:
                expired += 1
            if listing.key in wanted:
                found[listing.key] = (listing.labels, listing.deadline)
        runs = {
            key: (*(found.get(key) or found.get(_parent(key)) or (_EMPTY, None)), str(head.token))
            for key, head in heads.items()
        }
        done = time.monotonic()
        return _Runs(parked, expired, runs, done, done - started)

    @staticmethod
    def _look_up_new(source: Source, heads: Mapping[str, berth.Listing], runs: _Runs) -> None:
        """The run of each question asked since the last full listing, one key at a time (a bounded number)."""
        changed = [k for k, h in heads.items() if runs.runs.get(k, (None, None, ""))[2] != str(h.token)]
        for key in changed[:_LOOKUPS]:
            run = _run_of(source.store, key)
            found = (run.labels, run.deadline) if run is not None else (_EMPTY, None)
            runs.runs[key] = (*found, str(heads[key].token))

    # --- reading ---------------------------------------------------------------------------

    def page(
        self,
        *,
        identity: str | None = None,
        labels: Sequence[tuple[str, str]] = (),
        prefix: str = "",
        offset: int = 0,
        limit: int = 25,
        sort: str = "newest",
    ) -> Page:
        """Open questions matching the filters, in `sort` order (see `SORTS`): `limit` of them from `offset`, opened."""
        if sort not in SORTS:
            raise ValueError(f"unknown sort {sort!r}: one of {', '.join(SORTS)}")
        snap = self.snapshot()
        matching = [
            i
            for i in snap.items
            if (identity is None or i.identity == identity)
            and i.key.startswith(prefix)
            and all(i.labels.get(k) == v for k, v in labels)
        ]
        if sort == "deadline":  # stable: among equal deadlines, newest first as listed
            matching.sort(key=lambda i: (i.deadline is None, i.deadline or snap.taken_at))
        window = matching[offset : offset + limit]
        cards = [c for c in (self.card(i) for i in window) if c is not None]
        return Page(cards, len(matching), offset, limit, snap)

    def card(self, item: Item) -> Card | None:
        """Open one question (None if it was consumed since the snapshot); an unreadable one is skipped."""
        try:
            found = self.sources[item.identity].questions.record(item.key)
        except (berth.IntegrityError, berth.FormatError) as exc:
            logging.getLogger("berth").warning("berth: skipping unreadable question record: %s", exc)
            return None
        if found is None:
            return None
        question, answer = found
        return Card(item, question, answer)

    def lookup(self, identity: str, key: str) -> Card | None:
        """The open question under `key`, opened, with its run's labels; None when nothing is pending."""
        source = self.sources[identity]
        found = source.questions.record(key)
        if found is None:
            return None
        question, answer = found
        listing = _run_of(source.store, key)
        head = next((h for h in source.questions.headers(key) if h.key == key), None)
        deadline = head.deadline if head is not None and head.deadline is not None else None
        if deadline is None and listing is not None:
            deadline = listing.deadline
        labels = listing.labels if listing is not None else _EMPTY
        item = Item(identity, key, question.run_id, question.asked_at, deadline, labels, "")
        return Card(item, question, answer)

    def recent(self, snapshot: Snapshot, *, identity: str | None = None) -> list[tuple[Given, str]]:
        """Answers given through this server, newest first, each with its fate in `snapshot` (see `Given.fate`)."""
        with self._lock:
            given = list(self.given)
        return [(g, g.fate(snapshot)) for g in given if identity is None or g.identity == identity]

    def runs(self, identity: str, *, prefix: str = "", offset: int = 0, limit: int = 100) -> list[berth.Listing]:
        """Parked runs under `prefix` (headers only), `limit` of them from `offset`, in backend order."""
        out: list[berth.Listing] = []
        for n, listing in enumerate(self.sources[identity].store.list(prefix)):
            if n >= offset + limit:
                break
            if n >= offset:
                out.append(listing)
        return out

    # --- answering -------------------------------------------------------------------------

    def answer(
        self,
        identity: str,
        key: str,
        question_id: str,
        text: str,
        *,
        by: str,
        via: str,
        decision: str | None = None,
        arguments: Mapping[str, object] | None = None,
    ) -> Answered:
        """Record `by`'s answer to question `question_id` under `key`, bound to exactly that question.

        Answers to one key are taken one at a time, so of identical answers sent at once (a
        double click, a retrying client) one is recorded, audited and counted, and the others
        are refused as already answered: the store itself returns an identical repeat as if new.

        `decision` (and, for `edit`, `arguments`) is the decision made; None reads it from `text`
        (`berth.QuestionStore.provide`). A question that declares no decisions but whose run's
        `berth.choices` label offers approve or reject gets them as text (`approve: <note>`), as
        such hosts read it.

        Raises:
            Refused: 404 when nothing is pending at `key`; 409 when `question_id` was
                superseded (the card then holds the new question) or was already answered;
                410 when the question's deadline has passed (its run never resumes).
            berth.InvalidKey: a malformed key (before any I/O).
            berth.InvalidAnswer: a decision the question does not accept, or malformed edit arguments.
        """
        with self._answer_locks[hash((identity, key)) % _ANSWER_LOCKS]:
            return self._answer(identity, key, question_id, text, by, via, decision, arguments)

    def _answer(
        self,
        identity: str,
        key: str,
        question_id: str,
        text: str,
        by: str,
        via: str,
        decision: str | None,
        arguments: Mapping[str, object] | None,
    ) -> Answered:
        questions = self.sources[identity].questions
        card = self.lookup(identity, key)
        if card is None:
            raise Refused(404, f"nothing is pending at {where(identity, key)}")
        if card.question.id != question_id:
            raise Refused(409, f"question {question_id!r} at {where(identity, key)} was superseded by a new one", card)
        if card.expired(_utcnow()):
            assert card.item.deadline is not None
            raise Refused(
                410,
                f"question {question_id!r} at {where(identity, key)} expired at {card.item.deadline.isoformat()}: "
                "its run will never resume, so no answer is recorded",
                card,
            )
        if card.answer is not None:
            raise Refused(409, f"question {question_id!r} at {where(identity, key)} was already answered", card)
        if decision in ("approve", "reject") and not card.question.accepts and decision in card.choices:
            text, decision = decision + (f": {text}" if text else ""), None  # a `berth.choices` host reads text
        try:
            answer = questions.provide(key, question_id, text, by=by, decision=decision, arguments=arguments)
        except berth.AnswerRefused as exc:
            now = self.lookup(identity, key)
            raise Refused(404 if now is None else 409, str(exc), now) from exc
        audit.info(
            "answer identity=%r key=%r question_id=%r run_id=%r by=%r via=%s decision=%s chars=%d",
            identity,
            key,
            question_id,
            card.question.run_id,
            by,
            via,
            answer.decision.value,
            len(text),
        )
        counter = (identity, via)
        with self._lock:
            self.answers_given[counter] = self.answers_given.get(counter, 0) + 1
            self.given.appendleft(
                Given(
                    identity,
                    key,
                    question_id,
                    card.question.asked_at,
                    card.item.deadline,
                    answer.decision.value,
                    answer.by,
                    answer.answered_at,
                )
            )
        self.invalidate()
        return Answered(answer, Card(card.item, card.question, answer))
