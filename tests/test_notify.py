"""Notifications: signed webhooks to a real receiver on 127.0.0.1, never in the way of a park."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

import berth
from berth._notify import SIGNATURE_HEADER, notice_id, sign
from berth.testing import make_envelope
from tests._net import free_port
from tests._receiver import Receiver

SECRET = "s3cret-shared-with-the-receiver"
FAST = {"retry_base": 0.05, "retry_max": 0.2, "close_timeout": 2.0}
PROMPT = "Refund account \u202e9876-5432\u202c? <!channel> & <https://evil.example|click>"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(SECRET).start() as r:
        yield r


def hook_for(receiver: Receiver, **options: object) -> berth.Webhook:
    return berth.Webhook(receiver.url, secret=SECRET, **{**FAST, **options})  # type: ignore[arg-type]


def test_an_asked_question_reaches_the_receiver_signed_within_2_s(receiver: Receiver) -> None:
    hook = hook_for(receiver, inbox_url="https://inbox.example/")
    deadline = datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        started = time.monotonic()
        question = questions.ask("org/repo#42", PROMPT, run_id="run-1", deadline=deadline)
        assert receiver.wait_for(1, timeout=2.0)
    got = receiver.got[0]
    assert got.valid and got.at - started < 2.0
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["Berth-Event"] == "question.asked"
    fields = got.payload["berth"]
    assert fields["id"] == got.headers["Berth-Notice-Id"]
    assert fields["id"] == notice_id("question.asked", "pr-bot", "org/repo#42", question.id)
    assert (fields["event"], fields["identity"], fields["key"], fields["question_id"], fields["run_id"]) == (
        "question.asked",
        "pr-bot",
        "org/repo#42",
        question.id,
        "run-1",
    )
    assert fields["deadline"] == deadline.isoformat()
    assert fields["url"] == "https://inbox.example/?identity=pr-bot&prefix=org%2Frepo%2342"
    # the bidi override is shown as a visible mark, never applied: in the prompt field and in Slack's text
    assert "\u202e" not in got.body.decode() and "\\u202e" in fields["prompt"]
    assert fields["prompt"].startswith("Refund account \\u202e9876-5432\\u202c?")
    # Slack's message: a top-level text plus blocks; <!channel> and a disguised link are escaped, not live
    text = got.payload["text"]
    assert isinstance(text, str) and "pr-bot: org/repo#42" in text and "2030-01-02 03:04 UTC" in text
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in text
    assert "<!channel>" not in text and "<!channel>" not in json.dumps(got.payload["blocks"])
    assert "<https://inbox.example/?identity=pr-bot&prefix=org%2Frepo%2342|Open in the inbox>" in text
    assert [b["type"] for b in got.payload["blocks"]] == ["section", "section", "section", "context"]


def test_the_prompt_can_be_left_out(receiver: Receiver) -> None:
    hook = hook_for(receiver, include_prompt=False)
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("k", "the customer's card ends 4242", run_id="r")
        assert receiver.wait_for(1)
    got = receiver.got[0]
    assert b"4242" not in got.body and b"customer" not in got.body
    assert "prompt" not in got.payload["berth"] and got.payload["berth"]["key"] == "k"


def test_suspend_and_an_answer_notify_and_the_answer_text_is_never_sent(receiver: Receiver) -> None:
    hook = hook_for(receiver)
    store = berth.open_store("memory://", identity="pr-bot", sealer=berth.PlaintextSealer())
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        coordinator = berth.Coordinator(store, questions)
        coordinator.suspend("org/repo#7", make_envelope(), "Merge it?")
        assert receiver.wait_for(1)
        pending = questions.pending("org/repo#7")
        assert pending is not None
        questions.provide("org/repo#7", pending.id, "yes, the secret plan", by="alice")
        questions.provide("org/repo#7", pending.id, "yes, the secret plan", by="alice")  # a retry: the same id
        assert receiver.wait_for(2)
        assert coordinator.wake("org/repo#7").decision is berth.WakeDecision.RESUME
        hook.flush(5)
    events = [r.payload["berth"]["event"] for r in receiver.got]
    assert events == ["question.asked", "question.answered", "question.answered"]
    answered = receiver.got[1].payload
    assert answered["berth"]["answered_by"] == "alice" and "Answered (respond) by alice" in answered["text"]
    assert answered["berth"]["decision"] == "respond"
    assert receiver.got[1].id == receiver.got[2].id  # receivers dedupe on it
    assert all(b"secret plan" not in r.body for r in receiver.got)


def test_the_async_twin_notifies_the_same_notice(receiver: Receiver) -> None:
    hook = hook_for(receiver)

    async def main() -> str:
        store = berth.aio.open_store("memory://", identity="pr-bot", sealer=berth.PlaintextSealer())
        async with berth.aio.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
            coordinator = berth.aio.Coordinator(store, questions)
            envelope = await coordinator.suspend("k", make_envelope(), "Deploy?")
            await questions.provide("k", envelope.labels["berth.question"], "ok", by="bob")
            await store.aclose()
            return envelope.labels["berth.question"]

    with hook:
        question_id = asyncio.run(main())  # aclose waited (off the loop) for the queue
        assert hook.stats.queued == 0
    assert sorted(r.id for r in receiver.got) == sorted(  # two senders: in either order
        [
            notice_id("question.asked", "pr-bot", "k", question_id),
            notice_id("question.answered", "pr-bot", "k", question_id),
        ]
    )
    assert all(r.valid for r in receiver.got)


def test_a_slow_receiver_never_holds_up_a_park(receiver: Receiver) -> None:
    receiver.hold = threading.Event()  # the receiver answers nothing until released
    hook = hook_for(receiver)
    store = berth.open_store("memory://", identity="pr-bot", sealer=berth.PlaintextSealer())
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        coordinator = berth.Coordinator(store, questions)
        took = []
        for n in range(5):
            started = time.perf_counter()
            coordinator.suspend(f"k{n}", make_envelope(), "Proceed?")
            took.append(time.perf_counter() - started)
        assert receiver.wait_for(2)  # two senders are stuck in the receiver
        assert not receiver.hold.is_set() and max(took) < 0.25, took
        receiver.hold.set()
        assert receiver.wait_for(5)


def test_a_slow_receiver_never_holds_up_an_async_park(receiver: Receiver) -> None:
    receiver.hold = threading.Event()
    hook = hook_for(receiver)

    async def main() -> float:
        store = berth.aio.open_store("memory://", identity="pr-bot", sealer=berth.PlaintextSealer())
        questions = berth.aio.open_questions("memory://", identity="pr-bot", notify=hook)
        coordinator = berth.aio.Coordinator(store, questions)
        started = time.perf_counter()
        for n in range(5):
            await coordinator.suspend(f"k{n}", make_envelope(), "Proceed?")
        return time.perf_counter() - started

    with hook:
        took = asyncio.run(main())
        assert receiver.wait_for(2) and not receiver.hold.is_set()
        assert took < 0.5, took
        receiver.hold.set()
        assert receiver.wait_for(5)


def test_nothing_is_lost_across_a_receiver_restart(caplog: pytest.LogCaptureFixture) -> None:
    receiver = Receiver(SECRET, port=free_port())
    hook = berth.Webhook(receiver.url, secret=SECRET, **FAST)  # type: ignore[arg-type]
    with receiver, hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        receiver.start()
        for n in range(10):
            questions.ask(f"before/{n}", "?", run_id="r")
        assert receiver.wait_for(10)
        receiver.stop()  # down: refused connections
        with caplog.at_level(logging.WARNING, logger="berth.notify"):
            for n in range(20):
                questions.ask(f"during/{n}", "?", run_id="r")
            end = time.monotonic() + 5
            while hook.stats.failed_attempts < 3 and time.monotonic() < end:
                hook.flush(0.05)
        assert hook.stats.failed_attempts >= 3
        assert "failed (attempt" in caplog.text and "/hook" not in caplog.text  # the URL's path never logged
        receiver.start()  # up again, same port
        assert receiver.wait_for(30)
        assert hook.flush(5)
    assert hook.stats.dropped == 0 and hook.stats.sent == 30


def test_retryable_answers_are_retried_and_others_dropped(receiver: Receiver) -> None:
    receiver.statuses = [507, 429, 200, 400]
    hook = hook_for(receiver, senders=1)
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("a", "?", run_id="r")
        assert receiver.wait_for(1) and hook.flush(5)
        questions.ask("b", "?", run_id="r")  # answered 400: a retry would not change it
        assert hook.flush(5)
    assert [r.payload["berth"]["key"] for r in receiver.got] == ["a", "a", "a", "b"]
    assert (hook.stats.sent, hook.stats.failed_attempts, hook.stats.dropped) == (1, 3, 1)


def test_a_full_queue_drops_the_notice_and_never_blocks(receiver: Receiver) -> None:
    receiver.hold = threading.Event()
    hook = hook_for(receiver, max_queue=2, senders=1)
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("k0", "?", run_id="r")
        assert receiver.wait_for(1)  # one in flight
        started = time.perf_counter()
        for n in range(1, 6):
            questions.ask(f"k{n}", "?", run_id="r")
        assert time.perf_counter() - started < 0.25
        assert hook.stats.dropped == 4 and hook.stats.queued == 2
        receiver.hold.set()
        assert receiver.wait_for(2)


def test_close_delivers_for_a_bound_then_drops_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    hook = berth.Webhook(f"http://127.0.0.1:{free_port()}/", secret=SECRET, **FAST)  # type: ignore[arg-type]
    questions = berth.open_questions("memory://", identity="pr-bot", notify=hook)
    for n in range(3):
        questions.ask(f"k{n}", "?", run_id="r")
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="berth.notify"):
        hook.close(timeout=0.3)
    assert time.monotonic() - started < 2.0
    assert hook.stats.dropped == 3 and hook.stats.queued == 0
    assert "dropped: the process is closing its webhook" in caplog.text
    questions.ask("late", "?", run_id="r")  # a closed webhook never fails the park
    assert hook.stats.dropped == 4
    questions.close()


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.statuses = [302]
    hook = hook_for(receiver)
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("k", "?", run_id="r")
        assert hook.flush(5)
    assert len(receiver.got) == 1 and hook.stats.dropped == 1


def test_deadline_warnings_once_for_unanswered_questions_near_their_deadline(receiver: Receiver) -> None:
    now = datetime.now(timezone.utc)
    hook = hook_for(receiver, warn_before=timedelta(hours=1), events=["question.deadline_near"])
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        near = questions.ask("near", "?", run_id="r", deadline=now + timedelta(minutes=30))
        answered = questions.ask("answered", "?", run_id="r", deadline=now + timedelta(minutes=30))
        questions.provide("answered", answered.id, "done")
        questions.ask("far", "?", run_id="r", deadline=now + timedelta(days=2))
        questions.ask("past", "?", run_id="r", deadline=now - timedelta(minutes=1))
        questions.ask("none", "?", run_id="r")
        assert hook.check_deadlines(questions, now=now) == 1
        assert hook.check_deadlines(questions, now=now + timedelta(minutes=1)) == 0  # warned once
        assert receiver.wait_for(1) and hook.flush(5)
    assert len(receiver.got) == 1  # asked and answered are not among the chosen events
    fields = receiver.got[0].payload["berth"]
    assert (fields["event"], fields["key"], fields["question_id"]) == ("question.deadline_near", "near", near.id)
    assert "deadline near" in receiver.got[0].payload["text"]


def test_verify_webhook_refuses_a_changed_body_an_old_stamp_and_another_secret() -> None:
    body = b'{"text": "hi"}'
    now = time.time()
    header = sign(SECRET.encode(), str(int(now)), body)
    assert berth.verify_webhook(body, header, secret=SECRET)
    assert not berth.verify_webhook(body + b" ", header, secret=SECRET)
    assert not berth.verify_webhook(body, header, secret=SECRET + "x")
    assert not berth.verify_webhook(body, header, secret=SECRET, now=now + 301)
    assert not berth.verify_webhook(body, "v1=" + header.rpartition("v1=")[2], secret=SECRET)
    assert SIGNATURE_HEADER == "Berth-Signature"


@pytest.mark.parametrize(
    ("url", "options", "error", "match"),
    [
        ("http://hooks.example.com/x", {}, berth.BerthError, "must use https"),
        ("ftp://127.0.0.1/x", {}, berth.BerthError, "https:// URL"),
        ("https://hooks.example.com/x", {"secret": "short"}, berth.BerthError, "at least 16"),
        ("https://hooks.example.com/x", {"events": ["question.lost"]}, berth.BerthError, "unknown notify events"),
        ("https://hooks.example.com/x", {"secret": 42}, TypeError, "secret must be"),
        ("https://hooks.example.com/x", {"warn_before": 60}, TypeError, "warn_before"),
    ],
)
def test_a_bad_webhook_is_refused_before_any_io(
    url: str, options: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        berth.Webhook(url, **{"secret": SECRET, **options})  # type: ignore[arg-type]


def test_notify_must_be_a_webhook() -> None:
    with pytest.raises(TypeError, match="notify must be a berth.Webhook"):
        berth.open_questions("memory://", identity="a", notify="https://hooks.example.com/x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="notify must be a berth.Webhook"):
        berth.aio.open_questions("memory://", identity="a", notify="https://hooks.example.com/x")  # type: ignore[arg-type]


def test_the_webhook_repr_hides_the_url_path() -> None:
    hook = berth.Webhook("https://hooks.slack.com/services/T0/B0/XYZSECRET", secret=SECRET)
    assert "XYZSECRET" not in repr(hook) and "hooks.slack.com" in repr(hook)


def test_once_the_receiver_answers_again_notices_waiting_for_a_retry_go_at_once() -> None:
    receiver = Receiver(SECRET, port=free_port())
    hook = berth.Webhook(receiver.url, secret=SECRET, retry_base=10.0, retry_max=10.0)  # a 5-10 s backoff
    with receiver, hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("a", "?", run_id="r")
        questions.ask("b", "?", run_id="r")
        end = time.monotonic() + 5
        while hook.stats.failed_attempts < 2 and time.monotonic() < end:
            hook.flush(0.05)
        assert hook.stats.failed_attempts == 2  # both wait at least 5 s for their next attempt
        receiver.start()
        questions.ask("c", "?", run_id="r")  # delivered at once: the receiver is back
        assert receiver.wait_for(3, timeout=3.0)


def test_check_new_announces_what_appears_after_its_first_look(receiver: Receiver) -> None:
    hook = hook_for(receiver)
    with hook, berth.open_questions("memory://", identity="pr-bot") as questions:  # asks without a webhook
        questions.ask("before", "?", run_id="r")
        assert hook.check_new(questions) == 0  # the first look only notes what is open
        new = questions.ask("after", "new one", run_id="r")
        answered = questions.ask("answered", "?", run_id="r")
        questions.provide("answered", answered.id, "done")
        questions.provide("before", questions.pending("before").id, "done")  # an answer is not a new question
        assert hook.check_new(questions) == 1
        assert hook.check_new(questions) == 0
        assert receiver.wait_for(1) and hook.flush(5)
    assert [r.payload["berth"]["question_id"] for r in receiver.got] == [new.id]


def test_watch_looks_periodically_and_stops(receiver: Receiver) -> None:
    hook = hook_for(receiver)
    with hook, berth.open_questions("memory://", identity="pr-bot") as questions:
        stop = hook.watch([questions], every=0.05)
        try:
            end = time.monotonic() + 5
            while "pr-bot" not in hook._known and time.monotonic() < end:  # the first look is done
                hook.flush(0.02)
            questions.ask("k", "?", run_id="r", deadline=datetime.now(timezone.utc) + timedelta(minutes=5))
            assert receiver.wait_for(2)  # asked, and its deadline is near
        finally:
            stop()
    assert sorted(r.payload["berth"]["event"] for r in receiver.got) == ["question.asked", "question.deadline_near"]


def test_a_long_prompt_fits_slacks_section_and_is_cut_between_escapes(receiver: Receiver) -> None:
    hook = hook_for(receiver)
    key = "k/" + "<" * 1000  # every character escaped: a heading longer than Slack takes, uncut
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask(key, "<" * 1500 + "\u202e" * 100, run_id="r")
        questions.ask("short", "x" * 1900 + "\u202e" * 100, run_id="r")
        assert receiver.wait_for(2)
    for got in receiver.got:
        for block in got.payload["blocks"][:-1]:
            text = block["text"]["text"]
            assert len(text) <= 3000
            assert not re.search(r"&[a-z]{0,3}…|\\u?[0-9a-f]{0,3}…", text), text[-12:]
    cut = next(r for r in receiver.got if r.payload["berth"]["key"] == "short").payload["berth"]
    assert cut["prompt_truncated"] and len(cut["prompt"]) <= 2000 and cut["prompt"].endswith("\\u202e…")


def test_a_notice_failing_while_the_webhook_closes_is_dropped_not_retried(receiver: Receiver) -> None:
    receiver.hold = threading.Event()
    receiver.status = 503
    hook = hook_for(receiver, senders=1)
    with berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("k", "?", run_id="r")
        assert receiver.wait_for(1)  # in flight, held
        hook.close(timeout=0.1)
        receiver.hold.set()  # now it answers 503
        end = time.monotonic() + 5
        while hook.stats.dropped == 0 and time.monotonic() < end:
            hook.flush(0.02)
        assert hook.flush(5) and hook.stats.dropped == 1 and hook.stats.queued == 0


def test_invisible_characters_and_line_breaks_in_a_prompt(receiver: Receiver) -> None:
    hook = hook_for(receiver)
    with hook, berth.open_questions("memory://", identity="pr-bot", notify=hook) as questions:
        questions.ask("k", "line one\r\nrm\u200b -rf\x1b[2J ~\nline\u3164three", run_id="r")
        assert receiver.wait_for(1)
    prompt = receiver.got[0].payload["berth"]["prompt"]
    assert prompt == "line one\nrm\\u200b -rf\\x1b[2J ~\nline\\u3164three"  # one rule: berth._text.visible
    assert ">rm\\u200b -rf\\x1b[2J ~\n>line\\u3164three" in receiver.got[0].payload["text"]
