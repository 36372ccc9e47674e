"""The inbox's data side without HTTP: pages open only what they show, snapshots are shared, counts are right."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

import berth
from berth._serve import Inbox, Source
from berth._serve._inbox import Refused

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def source() -> Iterator[Source]:
    backend_url = "memory://"
    store = berth.open_store(backend_url, identity="ops")
    questions = berth.QuestionStore(store.backend, identity="ops", clock=Clock())
    yield Source("ops", store, questions)
    store.close()


def park(source: Source, n: int, *, expired: bool = False) -> None:
    deadline = T0 - timedelta(days=1) if expired else datetime.now(timezone.utc) + timedelta(days=1)
    key = f"k{n:04d}"
    source.store.save(
        key,
        berth.Envelope(
            provider="p", provider_state={}, run_id=f"r{n}", deadline=deadline, labels={"parity": str(n % 2)}
        ),
    )
    source.questions.ask(key, f"question {n}", run_id=f"r{n}", deadline=deadline)


def test_a_page_opens_only_the_questions_it_shows(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(300):
        park(source, n)
    opened: list[str] = []
    real = source.questions.record
    monkeypatch.setattr(source.questions, "record", lambda key: opened.append(key) or real(key))
    inbox = Inbox([source], max_age=60)
    page = inbox.page(offset=50, limit=25)
    assert page.total == 300 and len(page.cards) == 25 and len(opened) == 25
    assert [c.question.prompt for c in page.cards] == [f"question {n}" for n in range(249, 224, -1)]  # newest first
    assert page.next_offset == 75 and page.prev_offset == 25
    odd = inbox.page(labels=[("parity", "1")], prefix="k01", limit=100)
    assert odd.total == 50 and all(int(c.question.key[1:]) % 2 == 1 for c in odd.cards)


def test_the_snapshot_is_shared_until_it_ages_and_an_answer_refreshes_it(source: Source) -> None:
    park(source, 1)
    inbox = Inbox([source], max_age=60)
    first = inbox.snapshot()
    park(source, 2)
    assert inbox.snapshot() is first  # shared: one listing serves every request for a while
    card = inbox.page().cards[0]
    done = inbox.answer("ops", card.question.key, card.question.id, "yes", by="alice", via="page")
    assert done.answer.by == "alice" and inbox.answers_given == {("ops", "page"): 1}
    assert inbox.page().cards[0].answer == done.answer  # cards are opened per request: the answer shows at once
    # the answer marked the snapshot stale: the next request is served the old one and starts a fresh listing
    deadline = time.monotonic() + 10
    while len(inbox.snapshot().items) != 2:
        assert time.monotonic() < deadline, "the background listing never finished"
        time.sleep(0.01)


def test_new_questions_get_their_runs_labels_between_full_listings(source: Source) -> None:
    park(source, 1)
    inbox = Inbox([source], max_age=0.001, runs_max_age=3600)
    assert inbox.snapshot(fresh=True).counts["ops"].parked == 1
    park(source, 2)
    snap = inbox.snapshot(fresh=True)
    assert [dict(i.labels) for i in snap.items] == [{"parity": "0"}, {"parity": "1"}]  # looked up by key
    assert snap.counts["ops"].parked == 1  # the full listing of runs is not due yet


def test_counts_for_metrics(source: Source) -> None:
    park(source, 1)
    park(source, 2, expired=True)
    source.store.save("no-question", berth.Envelope(provider="p", provider_state={}))
    counts = Inbox([source]).snapshot().counts["ops"]
    assert (counts.parked, counts.questions, counts.expired) == (3, 2, 1)
    assert counts.oldest_asked is not None and counts.oldest_asked > T0


def test_answers_are_bound_to_the_question_seen(source: Source) -> None:
    park(source, 1)
    inbox = Inbox([source], max_age=0)
    old = inbox.page().cards[0].question
    new = source.questions.ask(old.key, "changed?", run_id=old.run_id)
    with pytest.raises(Refused) as superseded:
        inbox.answer("ops", old.key, old.id, "yes", by="alice", via="api")
    assert superseded.value.status == 409 and superseded.value.card is not None
    assert superseded.value.card.question.prompt == "changed?"
    with pytest.raises(Refused) as missing:
        inbox.answer("ops", "k9999", new.id, "yes", by="alice", via="api")
    assert missing.value.status == 404
    assert source.questions.answer(old.key) is None


@pytest.mark.parametrize("full_listing", [True, False], ids=["full-listing", "by-key"])
def test_a_per_call_question_shows_its_runs_labels(source: Source, full_listing: bool) -> None:
    park(source, 1)
    inbox = Inbox([source], max_age=0 if full_listing else 0.001, runs_max_age=3600)
    inbox.snapshot(fresh=True)
    labels = {"berth.choices": "approve,reject", "team": "ops"}
    source.store.save("tickets/7", berth.Envelope(provider="p", provider_state={}, labels=labels))
    source.questions.ask("tickets/7/call-1", "Run refund(42)?", run_id="r7")
    inbox.snapshot(fresh=True)  # with the runs' listing cached when by key
    card = next(c for c in inbox.page().cards if c.question.key == "tickets/7/call-1")
    assert card.choices == ("approve", "reject") and card.shown_labels == [("team", "ops")]
    looked_up = inbox.lookup("ops", "tickets/7/call-1")
    assert looked_up is not None and looked_up.choices == ("approve", "reject")


def test_an_expired_question_is_refused_with_410_and_never_recorded(source: Source) -> None:
    park(source, 1, expired=True)
    inbox = Inbox([source], max_age=0)
    card = inbox.page().cards[0]
    assert card.expired(datetime.now(timezone.utc))
    with pytest.raises(Refused) as gone:
        inbox.answer("ops", card.question.key, card.question.id, "yes", by="alice", via="page")
    assert gone.value.status == 410 and "expired" in str(gone.value) and "never resume" in str(gone.value)
    assert source.questions.answer(card.question.key) is None and inbox.answers_given == {}


def test_the_question_records_own_deadline_counts_when_its_run_has_none(source: Source) -> None:
    source.store.save("tickets/9", berth.Envelope(provider="p", provider_state={}))
    source.questions.ask("tickets/9/call-1", "Run refund(9)?", run_id="r9", deadline=T0)
    card = Inbox([source], max_age=0).lookup("ops", "tickets/9/call-1")
    assert card is not None and card.item.deadline == T0 and card.expired(T0 + timedelta(seconds=1))


def test_pages_sort_by_nearest_deadline_as_well_as_newest(source: Source) -> None:
    now = datetime.now(timezone.utc)
    for n, hours in enumerate([5, 1, None, 3]):
        key = f"d{n}"
        deadline = None if hours is None else now + timedelta(hours=hours)
        source.store.save(key, berth.Envelope(provider="p", provider_state={}, deadline=deadline))
        source.questions.ask(key, f"q{n}", run_id=f"r{n}", deadline=deadline)
    inbox = Inbox([source], max_age=0)
    assert [c.question.key for c in inbox.page().cards] == ["d3", "d2", "d1", "d0"]
    assert [c.question.key for c in inbox.page(sort="deadline").cards] == ["d1", "d3", "d0", "d2"]
    with pytest.raises(ValueError, match="unknown sort"):
        inbox.page(sort="oldest")


def test_answers_given_here_are_listed_with_what_became_of_them(source: Source) -> None:
    for n in (1, 2, 3):
        park(source, n)
    inbox = Inbox([source], max_age=0)
    for card in inbox.page().cards:
        inbox.answer("ops", card.question.key, card.question.id, "yes", by="alice", via="page")
    assert {g.key: fate for g, fate in inbox.recent(inbox.snapshot())} == {
        "k0001": "waiting",
        "k0002": "waiting",
        "k0003": "waiting",
    }
    q1 = source.questions.pending("k0001")
    assert q1 is not None and source.questions.consume("k0001", q1.id)  # its run woke and took the answer
    source.questions.ask("k0002", "and now?", run_id="r2")  # its run resumed and asked anew
    given = inbox.recent(inbox.snapshot())  # newest answer first: the page answered k0003 first
    assert [(g.key, g.by, g.decision, fate) for g, fate in given] == [
        ("k0001", "alice", "respond", "taken"),
        ("k0002", "alice", "respond", "asked-again"),
        ("k0003", "alice", "respond", "waiting"),
    ]
    assert inbox.recent(inbox.snapshot(), identity="other") == []
