"""Notifications: tell people a question was asked, nears its deadline, or was answered, by a signed webhook.

    QuestionStore.ask / provide, a deadline scan  ->  Webhook.asked / answered / deadline_near
        the notice's JSON body is built there and queued (bounded; never blocks, never raises)
    sender threads: POST, signed (HMAC-SHA256 over "<timestamp>.<body>", a fresh timestamp per attempt)
        2xx: sent.  Refused, a timeout, 408, 429 or 5xx: again after an exponential backoff with jitter,
        until `retry_for` has passed.  Any other answer (4xx, a redirect): dropped.  Each counted and logged.
    close(): what is queued is delivered for up to `close_timeout` seconds; what is left is dropped, counted
        and logged.  The same runs at interpreter exit for a webhook that was never closed.

The body is one JSON object a Slack incoming webhook accepts as it is (`text` and `blocks`) with berth's
own fields under `berth`, among them `id`: the same for every delivery of one notice (retries, the
library and `berth serve` both announcing, a restarted serve warning again), so a receiver dedupes on it.
The prompt is customer data: it is sent (with control and bidi characters as visible escapes, capped)
unless the webhook is built with `include_prompt=False`. docs/notifications.md is the receiver's side.
"""

from __future__ import annotations

import atexit
import hashlib
import heapq
import hmac
import itertools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from berth._errors import BerthError, FormatError, IntegrityError, where
from berth._public import publish
from berth._text import visible
from berth._time import utcnow

__all__ = [
    "ASKED",
    "ANSWERED",
    "DEADLINE_NEAR",
    "EVENTS",
    "SIGNATURE_HEADER",
    "Webhook",
    "as_webhook",
    "verify_webhook",
]

log = logging.getLogger("berth.notify")

ASKED = "question.asked"
DEADLINE_NEAR = "question.deadline_near"
ANSWERED = "question.answered"
EVENTS = (ASKED, DEADLINE_NEAR, ANSWERED)
"""Every event a webhook can send, as the payload's `berth.event` names it."""

SIGNATURE_HEADER = "Berth-Signature"
"""`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the shared secret>` (Stripe's layout)."""

PROMPT_CHARS = 2000  # of the prompt as shown (escapes visible); Slack's section text holds 3,000
BLOCK_CHARS = 3000  # Slack refuses a message whose section text is longer (invalid_blocks: a 400, dropped)
_MIN_SECRET_BYTES = 16
_READ_BYTES = 64 * 1024  # of a receiver's answer: read so the connection ends cleanly, never kept
_RETRYABLE = frozenset({408, 425, 429})  # and every 5xx


class QuestionHeaders(Protocol):
    """What a deadline scan needs of a question store (`berth.QuestionStore` is one)."""

    identity: str

    def headers(self, prefix: str = "") -> Iterable[Any]:
        """The records' cleartext headers."""
        ...

    def record(self, key: str) -> Any:
        """(question, answer or None) under `key`, or None."""
        ...


@dataclass
class _Delivery:
    id: str
    event: str
    body: bytes
    where: str
    first: float  # time.monotonic() when queued
    attempts: int = 0


@dataclass
class NotifyStats:
    """What a webhook did since it was built (counters) and holds now (`queued`)."""

    sent: int = 0
    failed_attempts: int = 0
    dropped: int = 0
    queued: int = 0
    by_event: dict[str, int] = field(default_factory=dict)


class Webhook:
    """Sends a signed JSON notice to `url` when a question is asked, nears its deadline, or is answered.

    Give it to a question store (`berth.open_questions(..., notify=hook)`, `berth.aio.open_questions`
    likewise) and every `ask` and `provide` of that store queues a notice; `check_deadlines(questions)`
    (run periodically, as `berth serve --notify-url` does) queues the deadline warnings. Queuing never
    blocks and never raises: a full queue drops the notice, logged and counted. Delivery is at least once
    while the process runs (retried with backoff and jitter for `retry_for` seconds); the payload's
    `berth.id` lets a receiver drop repeats. One webhook may serve several stores and threads.

    Args:
        url: where to POST: https, or http to a loopback address only (the body carries prompts).
        secret: the shared secret the body is signed with (at least 16 bytes; str is UTF-8).
        inbox_url: the inbox's base URL (`https://berth.example.com/`): each notice links the question.
        include_prompt: send the question's prompt (customer data) to the receiver; False leaves it out.
        events: which events to send (default all of `EVENTS`).
        warn_before: how long before a question's deadline `check_deadlines` warns.
        timeout: seconds for one delivery attempt (connect and answer).
        max_queue: notices held at once (queued or waiting for a retry); more are dropped.
        retry_for: seconds a notice is retried before it is dropped.
        retry_base: the backoff's first wait: attempt n waits between half and all of
            `retry_base * 2**(n-1)` seconds, capped at `retry_max`.
        retry_max: the longest wait between two attempts.
        close_timeout: seconds `close` (and a question store's close) waits for the queue to drain.
        senders: threads delivering at once.

    Raises:
        BerthError: a URL that is not https (or http to loopback), or a short secret (before any I/O).
        TypeError: an argument of the wrong type.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: str | bytes,
        inbox_url: str | None = None,
        include_prompt: bool = True,
        events: Iterable[str] = EVENTS,
        warn_before: timedelta = timedelta(hours=1),
        timeout: float = 10.0,
        max_queue: int = 10_000,
        retry_for: float = 3600.0,
        retry_base: float = 0.5,
        retry_max: float = 60.0,
        close_timeout: float = 5.0,
        senders: int = 2,
    ):
        from urllib.parse import urlsplit  # urllib waits for a webhook: `import berth` stays light

        if not isinstance(url, str):
            raise TypeError(f"url must be a str, got {type(url).__name__}")
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme not in ("https", "http") or not host:
            raise BerthError(f"notify url must be an https:// URL, got one with scheme {parts.scheme!r}")
        if parts.scheme == "http" and not _loopback(host):
            raise BerthError(f"notify url {parts.scheme}://{host}/... must use https: the body carries prompts")
        if isinstance(secret, str):
            secret = secret.encode()
        if not isinstance(secret, bytes):
            raise TypeError(f"secret must be str or bytes, got {type(secret).__name__}")
        if len(secret) < _MIN_SECRET_BYTES:
            raise BerthError(
                f"notify secret is {len(secret)} bytes; use at least {_MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)"
            )
        chosen = frozenset(events)
        unknown = chosen - set(EVENTS)
        if unknown:
            raise BerthError(f"unknown notify events {sorted(unknown)}; choose from {list(EVENTS)}")
        if not isinstance(warn_before, timedelta):
            raise TypeError(f"warn_before must be a timedelta, got {type(warn_before).__name__}")
        if inbox_url is not None and urlsplit(inbox_url).scheme not in ("http", "https"):
            raise BerthError("inbox_url must be an http:// or https:// URL")
        self.url = url
        self.inbox_url = inbox_url.rstrip("/") if inbox_url else None
        self.include_prompt = bool(include_prompt)
        self.events = chosen
        self.warn_before = warn_before
        self.timeout = float(timeout)
        self.max_queue = int(max_queue)
        self.retry_for = float(retry_for)
        self.retry_base = float(retry_base)
        self.retry_max = float(retry_max)
        self.close_timeout = float(close_timeout)
        self.senders = max(1, int(senders))
        self.stats = NotifyStats()
        self._secret = secret
        self._shown_url = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/..."  # the path may be a token
        self._opener = _opener()
        self._heap: list[tuple[float, int, _Delivery]] = []
        self._seq = itertools.count()
        self._in_flight = 0
        self._backing_off = False  # a notice waits for a retry
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._stopping = False
        self._warned: dict[tuple[str, str, datetime], datetime] = {}  # handled by check_deadlines
        self._known: dict[str, set[tuple[str, datetime]]] = {}  # open questions check_new has seen

    def __repr__(self) -> str:
        return f"berth.Webhook({self._shown_url!r}, include_prompt={self.include_prompt})"

    def __enter__(self) -> Webhook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what is sent ------------------------------------------------------------------------

    def asked(self, identity: str, question: Any, deadline: datetime | None) -> None:
        """Queue the notice that `question` (a `berth.Question`) was asked; never blocks, never raises."""
        self._queue(ASKED, identity, question.key, question.id, question=question, deadline=deadline)

    def deadline_near(self, identity: str, question: Any, deadline: datetime) -> None:
        """Queue the warning that `question` is unanswered and its run's `deadline` is near."""
        self._queue(DEADLINE_NEAR, identity, question.key, question.id, question=question, deadline=deadline)

    def answered(self, identity: str, key: str, answer: Any) -> None:
        """Queue the notice that `answer` (a `berth.Answer`) was given under `key` (never its text)."""
        self._queue(ANSWERED, identity, key, answer.question_id, answer=answer)

    def _queue(self, event: str, identity: str, key: str, question_id: str, **parts: Any) -> None:
        if event not in self.events:
            return
        try:
            nid = notice_id(event, identity, key, question_id)
            body = json.dumps(self.payload(event, identity, key, question_id, nid, **parts)).encode()
            place = f"{where(identity, key)} question {question_id!r}"
            self._put(_Delivery(nid, event, body, place, time.monotonic()))
        except Exception as exc:  # a notice never fails the park or the answer it reports
            log.warning("berth: notice %s for %s not queued: %s", event, where(identity, key), exc)

    def payload(
        self,
        event: str,
        identity: str,
        key: str,
        question_id: str,
        nid: str,
        *,
        question: Any = None,
        answer: Any = None,
        deadline: datetime | None = None,
    ) -> dict[str, Any]:
        """The JSON object sent for one notice: Slack's `text` and `blocks`, and berth's fields under `berth`."""
        from urllib.parse import quote

        shown_key = visible(key)
        shown_identity = visible(identity)
        prompt: str | None = None
        truncated = False
        if question is not None and self.include_prompt:
            prompt = visible(question.prompt, lines=True)
            if len(prompt) > PROMPT_CHARS:
                prompt, truncated = _capped(prompt, PROMPT_CHARS), True
        link = f"{self.inbox_url}/?identity={quote(identity, safe='')}&prefix={quote(key, safe='')}"
        link = link if self.inbox_url else ""
        due = f" (deadline {_when(deadline)})" if deadline is not None else ""
        who = f"{_mrkdwn(shown_identity)}: {_mrkdwn(shown_key)}"
        if event == ASKED:
            head = f"A run waits for an answer{due}: {who}"
        elif event == DEADLINE_NEAR:
            head = f"Unanswered, deadline near{due}: {who}"
        else:
            head = f"Answered ({answer.decision}) by {_mrkdwn(visible(answer.by))}: {who}"
        head = _capped(head, BLOCK_CHARS - 2)  # a 1,024-byte key of escapes could pass Slack's limit
        text = head
        blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{head}*"}}]
        if prompt is not None:
            quoted = "\n".join(f">{line}" for line in _mrkdwn(prompt).split("\n"))
            if len(quoted) > BLOCK_CHARS:  # escaping (&lt;) and the quote marks lengthen it
                quoted, truncated = _capped(quoted, BLOCK_CHARS), True
            text = f"{head}\n{quoted}"
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": quoted}})
        if link:
            text += f"\n<{link}|Open in the inbox>"
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"<{link}|Open in the inbox>"}})
        context = f"berth · question {question_id} · notice {nid}"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(context)}]})
        fields: dict[str, Any] = {
            "id": nid,
            "event": event,
            "identity": identity,
            "key": key,
            "question_id": question_id,
            "run_id": question.run_id if question is not None else None,
            "asked_at": _iso(question.asked_at) if question is not None else None,
            "deadline": _iso(deadline),
            "url": link or None,
        }
        if self.include_prompt and question is not None:
            fields["prompt"] = prompt
            fields["prompt_truncated"] = truncated
        if answer is not None:
            fields["answered_by"] = answer.by
            fields["decision"] = str(answer.decision)
            fields["answered_at"] = _iso(answer.answered_at)
        return {"text": text, "blocks": blocks, "berth": fields}

    # --- the deadline scan --------------------------------------------------------------------

    def check_deadlines(self, questions: QuestionHeaders, *, now: datetime | None = None) -> int:
        """Queue a warning for each unanswered question of `questions` whose deadline is within `warn_before`.

        Reads the records' headers, and opens only the records whose deadline is near. Each question
        is warned about once by this webhook (a new webhook, say after a restart, warns again: with the
        same `berth.id`). Call it periodically; `berth serve --notify-url` does, every `--notify-every`.

        Returns:
            How many warnings were queued.

        Raises:
            BackendError: listing the headers failed.
        """
        if DEADLINE_NEAR not in self.events:
            return 0
        now = now or utcnow()
        identity = questions.identity
        queued = 0
        for done in [k for k, deadline in self._warned.items() if deadline <= now]:
            del self._warned[done]
        for listing in questions.headers():
            deadline = listing.deadline
            if deadline is None or deadline <= now or deadline - now > self.warn_before:
                continue
            seen = (identity, listing.key, listing.created_at)
            if seen in self._warned:
                continue
            try:
                record = questions.record(listing.key)
            except (IntegrityError, FormatError) as exc:
                log.warning("berth: deadline check skips an unreadable question record: %s", exc)
                continue
            self._warned[seen] = deadline
            if record is None or record[1] is not None:
                continue  # consumed since listed, or answered: nobody needs telling
            self.deadline_near(identity, record[0], deadline)
            queued += 1
        return queued

    def check_new(self, questions: QuestionHeaders) -> int:
        """Queue the `asked` notice of each unanswered question of `questions` asked since this webhook's last look.

        For a process that did not ask them (`berth serve`): the first call only notes what is open
        (announcing it would repeat every open question after each restart); each later call announces
        the questions that appeared since. Reads headers, and opens only the new records.

        Returns:
            How many notices were queued.

        Raises:
            BackendError: listing the headers failed.
        """
        if ASKED not in self.events:
            return 0
        identity = questions.identity
        heads = {(h.key, h.created_at): h.deadline for h in questions.headers()}
        known = self._known.get(identity)
        self._known[identity] = set(heads)
        if known is None:
            return 0
        queued = 0
        for key, created in sorted(set(heads) - known, key=lambda k: k[1]):
            try:
                record = questions.record(key)
            except (IntegrityError, FormatError) as exc:
                log.warning("berth: new-question check skips an unreadable question record: %s", exc)
                continue
            if record is None or record[1] is not None:
                continue  # consumed or answered already: nobody needs telling
            self.asked(identity, record[0], heads[(key, created)])
            queued += 1
        return queued

    def watch(self, stores: Iterable[QuestionHeaders], *, every: float = 5.0) -> Callable[[], None]:
        """Every `every` seconds, in a thread, `check_new` and `check_deadlines` each of `stores`.

        What `berth serve --notify-url` runs. A failed look is logged and tried again next time.

        Returns:
            A function that stops the thread (after a look in progress ends).
        """
        chosen = list(stores)
        stop = threading.Event()

        def loop() -> None:
            while True:
                for questions in chosen:
                    try:
                        self.check_new(questions)
                        self.check_deadlines(questions)
                    except Exception as exc:  # the store is down: look again next time
                        log.warning("berth: notification check of %s failed: %s", where(questions.identity), exc)
                if stop.wait(every):
                    return

        thread = threading.Thread(target=loop, name="berth-notify-watch", daemon=True)
        thread.start()

        def stopper() -> None:
            stop.set()
            thread.join(self.timeout)

        return stopper

    # --- the queue and the senders ----------------------------------------------------------------

    def _put(self, delivery: _Delivery) -> None:
        with self._cond:
            if self._closed:
                self._drop(delivery, "the webhook is closed")
                return
            if len(self._heap) + self._in_flight >= self.max_queue:
                self._drop(delivery, f"the queue is full ({self.max_queue} notices)")
                return
            heapq.heappush(self._heap, (delivery.first, next(self._seq), delivery))
            self.stats.queued = len(self._heap) + self._in_flight
            if not self._threads:
                self._start()
            self._cond.notify()

    def _start(self) -> None:
        for n in range(self.senders):
            thread = threading.Thread(target=self._send_loop, name=f"berth-notify-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        atexit.register(self.close)  # a process that never closed its webhook still drains it, bounded

    def _drop(self, delivery: _Delivery, why: str) -> None:
        self.stats.dropped += 1
        log.error("berth: notice %s (%s, id %s) dropped: %s", delivery.event, delivery.where, delivery.id, why)

    def _next(self) -> _Delivery | None:
        with self._cond:
            while True:
                if self._stopping:
                    return None
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    delivery = heapq.heappop(self._heap)[2]
                    self._in_flight += 1
                    return delivery
                self._cond.wait(self._heap[0][0] - now if self._heap else None)

    def _send_loop(self) -> None:
        while True:
            delivery = self._next()
            if delivery is None:
                return
            retry_in, refused = self._attempt(delivery)
            with self._cond:
                self._in_flight -= 1
                if retry_in is None and refused is None:
                    self.stats.sent += 1
                    self.stats.by_event[delivery.event] = self.stats.by_event.get(delivery.event, 0) + 1
                    if self._backing_off:  # the receiver is back: what waits for a retry goes now
                        now = time.monotonic()
                        self._heap = [(min(due, now), seq, d) for due, seq, d in self._heap]
                        heapq.heapify(self._heap)
                        self._backing_off = False
                else:
                    self.stats.failed_attempts += 1
                if refused is not None:
                    self._drop(delivery, refused)
                elif retry_in is not None:
                    if self._stopping:
                        self._drop(delivery, "the process is closing its webhook")
                    elif time.monotonic() + retry_in - delivery.first > self.retry_for:
                        self._drop(delivery, f"not delivered in {self.retry_for:g} s ({delivery.attempts} attempts)")
                    else:
                        heapq.heappush(self._heap, (time.monotonic() + retry_in, next(self._seq), delivery))
                        self._backing_off = True
                self.stats.queued = len(self._heap) + self._in_flight
                self._cond.notify_all()

    def _attempt(self, delivery: _Delivery) -> tuple[float | None, str | None]:
        """Deliver once: (None, None) when sent, (None, why) when refused for good, else (seconds to wait, None)."""
        import urllib.error
        import urllib.request

        delivery.attempts += 1
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "berth-webhook",
            SIGNATURE_HEADER: sign(self._secret, stamp, delivery.body),
            "Berth-Event": delivery.event,
            "Berth-Notice-Id": delivery.id,
        }
        request = urllib.request.Request(self.url, data=delivery.body, headers=headers, method="POST")
        retry_after: float | None = None
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read(_READ_BYTES)
            return None, None
        except urllib.error.HTTPError as exc:
            exc.close()
            why = f"HTTP {exc.code}"
            if exc.code < 500 and exc.code not in _RETRYABLE:
                return None, f"{self._shown_url} answered {why}, which a retry will not change"
            retry_after = _seconds(exc.headers.get("Retry-After"))
        except (OSError, ValueError) as exc:  # refused, reset, timed out, DNS, a bad answer
            why = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
        span = min(self.retry_max, self.retry_base * 2 ** (delivery.attempts - 1))
        wait = span / 2 + random.uniform(0, span / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_max))
        log.warning(
            "berth: notice %s (%s) to %s failed (attempt %d: %s); again in %.1f s",
            delivery.event,
            delivery.where,
            self._shown_url,
            delivery.attempts,
            why,
            wait,
        )
        return wait, None

    # --- draining ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued notice is delivered or dropped, for up to `timeout` seconds (None: forever).

        Returns:
            True if nothing is left queued.
        """
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (self._heap or self._in_flight) and not self._stopping:  # closed: nothing more is sent
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return not self._heap and not self._in_flight

    def close(self, timeout: float | None = None) -> None:
        """Stop taking notices, deliver what is queued for up to `timeout` seconds (default `close_timeout`),
        then drop what is left (each logged and counted) and stop the senders. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        self.flush(self.close_timeout if timeout is None else timeout)
        with self._cond:
            self._stopping = True
            left = [entry[2] for entry in self._heap]
            self._heap.clear()
            for delivery in left:
                self._drop(delivery, "the process is closing its webhook")
            self.stats.queued = self._in_flight
            self._cond.notify_all()
        end = time.monotonic() + 0.5  # a sender mid-attempt finishes it on its own (daemon threads)
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))

    # --- /metrics ------------------------------------------------------------------------------

    def metrics_lines(self) -> list[str]:
        """This webhook's figures in the Prometheus text format (for `berth serve`'s /metrics)."""
        s = self.stats
        lines = [
            "# HELP berth_notifications_total Notices delivered by the webhook (2xx answers), by event.",
            "# TYPE berth_notifications_total counter",
            *(f'berth_notifications_total{{event="{e}"}} {s.by_event.get(e, 0)}' for e in EVENTS),
            "# HELP berth_notification_failures_total Delivery attempts that failed (each retry counts).",
            "# TYPE berth_notification_failures_total counter",
            f"berth_notification_failures_total {s.failed_attempts}",
            "# HELP berth_notifications_dropped_total Notices given up on: queue full, refused, retries out, closed.",
            "# TYPE berth_notifications_dropped_total counter",
            f"berth_notifications_dropped_total {s.dropped}",
            "# HELP berth_notifications_queued Notices waiting to be delivered or retried.",
            "# TYPE berth_notifications_queued gauge",
            f"berth_notifications_queued {s.queued}",
        ]
        return lines


def _opener() -> Any:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        # A redirected POST would be re-sent as a GET without its body (or to another host): refuse it.
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirect)


def as_webhook(notify: object) -> Webhook | None:
    """`notify` as a question store takes it: a `Webhook` or None (TypeError otherwise, before any I/O)."""
    if notify is not None and not isinstance(notify, Webhook):
        raise TypeError(f"notify must be a berth.Webhook or None, got {type(notify).__name__}")
    return notify


def notice_id(event: str, identity: str, key: str, question_id: str) -> str:
    """The idempotency id of one notice: the same whoever sends it and however often (a receiver dedupes on it)."""
    raw = "\0".join((event, identity, key, question_id)).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def sign(secret: bytes, stamp: str, body: bytes) -> str:
    """The `Berth-Signature` header value for `body` sent at unix time `stamp`."""
    mac = hmac.new(secret, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={mac}"


def verify_webhook(
    body: bytes, signature: str, *, secret: str | bytes, tolerance: float = 300.0, now: float | None = None
) -> bool:
    """True if `signature` (the `Berth-Signature` header) signs `body` under `secret`, sent within `tolerance` s.

    For a Python receiver of `berth.Webhook`; docs/notifications.md has the same check in a few lines of
    stdlib for receivers without berth. A receiver also drops a `berth.id` it has seen (retries repeat it).
    """
    if isinstance(secret, str):
        secret = secret.encode()
    fields: dict[str, list[str]] = {}
    for part in signature.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    stamp = (fields.get("t") or [""])[0]
    if not stamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        return False
    expected = sign(secret, stamp, body).rpartition("v1=")[2]
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _mrkdwn(text: str) -> str:
    # Slack reads <...> as links and mentions (<!channel>): a prompt must not ping or disguise a link.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _capped(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (an ellipsis last), never inside an escape (`&lt;`) or a `\\u202e` mark."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp, mark = cut.rfind("&"), cut.rfind("\\")
    if amp > len(cut) - 5 and ";" not in cut[amp:]:
        cut = cut[:amp]
    elif mark > len(cut) - 10:
        cut = cut[:mark]
    return cut + "…"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _seconds(raw: str | None) -> float | None:
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


publish(globals())  # its public names read as berth.X
