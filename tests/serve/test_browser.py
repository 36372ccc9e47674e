"""The inbox page in a real browser: Playwright driving Debian's Chromium (never a downloaded build).

One browser for the session, a fresh context (cookies) per test. Under CI=true a
missing Playwright or /usr/bin/chromium fails the run (.ci/run installs chromium).
Set BERTH_UPDATE_SCREENSHOT=1 to write the pictures of docs/serve.md and the README to docs/.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import berth
from berth._serve import Auth, parse_tokens
from tests.conftest import unavailable
from tests.serve.conftest import ALICE, IDENTITY, OTHER, TOKENS, Park, Server, serving

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# one worker launches Chromium for this module (./dev test runs under xdist)
pytestmark = pytest.mark.xdist_group("browser")
DOCS = Path(__file__).resolve().parents[2] / "docs"
TIMEOUT_MS = 30_000  # 10 s ran out once in CI's full run on a loaded two-core machine (a POST's notice)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for this module (sync Playwright runs an event loop in the main thread
    while it is open: closed with the module, so later tests may call asyncio.run)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright", "./dev test installs it")
    if not os.access(CHROMIUM, os.X_OK):
        unavailable("Chromium", f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context and page (no cookies), failing the test on any script or CSP error."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and not expected(msg.text) else None)
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"the page logged errors: {errors}"


def expected(message: str) -> bool:
    """The console line a browser logs for a page served with a refusal status the test asked for."""
    return message.startswith("Failed to load resource") and any(
        f"status of {s}" in message for s in (400, 401, 403, 409)
    )


def login(page: Any, server: Server, token: str = ALICE, path: str = "/") -> None:
    page.goto(server.url + path)
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_selector("#live")


def card(page: Any, key: str) -> Any:
    return page.locator("article.card", has=page.locator("h2.key", has_text=key))


def test_log_in_answer_see_it_answered_and_log_out(page: Any, inbox: Server, park: Park) -> None:
    key, q = park("answer-me", "Push the fix for the flaky test to main?", labels={"repo": "org/repo"})
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    assert "/login?next=" in page.url
    page.fill("#token", "not-the-token-at-all")
    page.click("button[type=submit]")
    assert page.locator(".notice.error").inner_text() == "That token is not valid."
    assert inbox.auth.failed_logins >= 1
    page.fill("#token", ALICE)
    page.click("button[type=submit]")
    page.wait_for_selector("#live")
    assert page.url == inbox.url + f"/?prefix={park.prefix}"  # back where the login began
    assert page.locator(".person").inner_text() == "alice"
    c = card(page, key)
    assert c.locator(".prompt").inner_text() == "Push the fix for the flaky test to main?"
    assert "left" in c.locator("time[data-countdown]").inner_text()
    assert "repo" in c.locator(".labels").inner_text()
    assert "SEALED-STATE" not in page.content()
    # keyboard: j focuses the first card, a its answer box, Ctrl+Enter sends
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.keyboard.type("yes, push it")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector(".notice.ok")
    c = card(page, key)
    assert c.locator(".badge.done").inner_text() == "answered"
    assert "Answered by alice" in c.locator(".answered-by").inner_text()
    assert c.locator("form.answer").count() == 0
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.text == "yes, push it" and stored.by == "alice"
    assert stored.question_id == q.id
    page.click("#logout")
    page.wait_for_selector("#token")
    page.goto(inbox.url + "/")
    assert page.url.endswith("/login") and page.locator("#token").is_visible()


def test_a_new_question_arrives_live(page: Any, inbox: Server, park: Park) -> None:
    park("first", "Already here?")
    login(page, inbox, path="/")
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    page.evaluate("window.notReloaded = true")
    key, _ = park("second", "Arrived while the page was open?")
    card(page, key).wait_for()
    assert page.evaluate("window.notReloaded") is True
    assert page.locator("article.card h2.key").all_inner_texts()[0] == key  # newest first
    assert "2 of 2" in page.locator("#summary").inner_text()


def test_a_superseded_question_refuses_the_answer_and_shows_the_new_prompt(
    page: Any, inbox: Server, park: Park
) -> None:
    key, old = park("changing", "Deploy v1 to production?")
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    c.locator("textarea").fill("yes, deploy")
    new = park.ask_again(key, "Deploy v2 to production instead?")
    c.locator(".stale").wait_for(state="visible")  # the live update marks it; it does not swap the text away
    assert c.locator(".prompt").inner_text() == "Deploy v1 to production?"
    c.locator("button[value=respond]").click()
    notice = page.locator("#notice.error")
    notice.wait_for()
    assert "changed before your answer arrived" in notice.inner_text()
    assert page.evaluate("document.activeElement.id") == "notice"  # focus lands on what changed
    assert page.locator("#notice-prompt").inner_text() == "Deploy v2 to production instead?"
    assert inbox.questions[IDENTITY].answer(key) is None
    assert inbox.questions[IDENTITY].pending(key) == new
    fresh = card(page, key)
    assert fresh.locator("input[name=question_id]").get_attribute("value") == new.id


def test_prompts_labels_and_keys_render_as_text(page: Any, inbox: Server, park: Park) -> None:
    hostile = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
    key, _ = park(
        'x"><script>window.pwned=3</script>', hostile, labels={"<b>lab</b>": '"><img src=y onerror=alert(1)>'}
    )
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    assert c.locator(".prompt").inner_text() == hostile
    assert c.locator("img").count() == 0 and c.locator("script").count() == 0
    assert "<b>lab</b>" in c.locator(".labels").inner_text()
    page.wait_for_timeout(500)  # a live update or two
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_structured_choices_reject_with_a_reason(page: Any, inbox: Server, park: Park) -> None:
    key, _ = park("refund", "Refund 420 EUR to customer 1881?", labels={"berth.choices": "approve,reject"})
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    assert c.locator("button[value=approve]").is_visible() and c.locator("button[value=respond]").count() == 0
    c.locator("textarea").fill("over the limit")
    c.locator("button[value=reject]").click()
    page.wait_for_selector(".notice.ok")
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.text == "reject: over the limit"


def test_readable_on_a_phone(browser: Any, inbox: Server, park: Park) -> None:
    key, _ = park("release", "Approve the release notes?")
    long_word = "x" * 300  # no break opportunity: must wrap anywhere, never widen the page
    tool = berth.ToolRequest("publish", {"notes": long_word, "nested": {"path": "/" + long_word}}, agent="release-bot")
    approval, _ = park("publish", "Publish?", accepts=("approve", "edit", "reject"), tool=tool)
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        pg = context.new_page()
        login(pg, inbox)
        pg.goto(inbox.url + f"/?prefix={park.prefix}")
        c = card(pg, key)
        assert c.locator("textarea").is_visible()
        card(pg, approval).locator("details.edit summary").click()
        assert card(pg, approval).locator("textarea[data-arg=notes]").is_visible()
        width = pg.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page scrolls sideways on a phone ({width}px)"
    finally:
        context.close()


def test_screenshots_for_the_docs(browser: Any, tmp_path: Path, keyring: berth.Keyring) -> None:
    """The pictures of docs/serve.md and the README: the inbox on a desktop and on a phone, a tool
    approval with its arguments, and an edit of them. BERTH_UPDATE_SCREENSHOT=1 writes them to docs/."""
    with serving(tmp_path / "shot.db", keyring, Auth(tokens=parse_tokens(TOKENS)), identities=(IDENTITY, OTHER)) as s:
        park = Park(s)
        park.prefix = "org/repo#"
        park(
            "41",
            "Push the fix for the flaky test to main?",
            labels={"repo": "org/repo", "pr": "https://github.com/org/repo/pull/41", "berth.choices": "approve,reject"},
        )
        park(
            "42",
            "Close issue 42 as a duplicate of 17?",
            labels={"repo": "org/repo"},
            deadline=timedelta(minutes=40),
            accepts=("approve", "edit", "reject"),
            tool=berth.ToolRequest(
                "close_issue",
                {"issue": 42, "duplicate_of": 17, "comment": "Same crash as #17: the parser fails on empty input."},
                agent="triage-bot",
                description="Closes the issue with a comment. Found by **duplicate search**: see "
                "[#17](https://github.com/org/repo/issues/17).",
            ),
        )
        park.prefix = "tickets/"
        key, q = park(
            "8812",
            "Refund 420 EUR to customer 1881? Over the 250 EUR limit.",
            identity=OTHER,
            labels={"team": "support", "ticket": "https://tickets.example/8812", "berth.choices": "approve,reject"},
        )
        s.questions[OTHER].provide(key, q.id, "approve: loyal customer", by="bob")
        park(
            "8815",
            "Pay the refund to account \u202e9876-5432\u202c?",
            identity=OTHER,
            labels={"team": "support"},
        )
        shots: dict[str, Path] = {}
        context = browser.new_context(viewport={"width": 1100, "height": 1400}, device_scale_factor=1)
        try:
            pg = context.new_page()
            login(pg, s)
            pg.locator("article.card").first.wait_for()
            shots["inbox.png"] = tmp_path / "inbox.png"
            pg.screenshot(path=str(shots["inbox.png"]), full_page=False)
            approval = card(pg, "org/repo#42")
            shots["inbox-approval.png"] = tmp_path / "inbox-approval.png"
            approval.screenshot(path=str(shots["inbox-approval.png"]))
            approval.locator("details.edit summary").click()
            approval.locator("textarea[data-arg=comment]").fill("Same crash as #17; the fix is in #41.")
            approval.locator("textarea[data-arg=duplicate_of]").fill("41")
            shots["inbox-edit.png"] = tmp_path / "inbox-edit.png"
            approval.screenshot(path=str(shots["inbox-edit.png"]))
        finally:
            context.close()
        phone = browser.new_context(
            viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, device_scale_factor=2
        )
        try:
            pg = phone.new_page()
            login(pg, s, path="/?sort=deadline")
            pg.locator("article.card").first.wait_for()
            shots["inbox-phone.png"] = tmp_path / "inbox-phone.png"
            pg.screenshot(path=str(shots["inbox-phone.png"]), full_page=False)
        finally:
            phone.close()
    for name, shot in shots.items():
        assert shot.stat().st_size > 10_000, name
        if os.environ.get("BERTH_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(shot, DOCS / name)


# Where a character of the card's prompt is drawn: the left edge of the first occurrence of `ch`.
DRAWN_AT = """([selector, ch]) => {
  const el = document.querySelector(selector);
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(ch);
    if (at >= 0) {
      const range = document.createRange();
      range.setStart(node, at); range.setEnd(node, at + 1);
      return range.getBoundingClientRect().left;
    }
  }
  return null;
}"""


def test_a_bidi_override_prompt_shows_its_controls_and_is_never_drawn_reordered(
    page: Any, inbox: Server, park: Park
) -> None:
    key, _ = park("bidi", "Pay to account \u202e9876-5432\u202c now?", labels={"pay\u202eee": "x\u2066y"})
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    prompt = c.locator(".prompt")
    assert prompt.inner_text() == "Pay to account \\u202e9876-5432\\u202c now?"
    assert prompt.locator(".ctl").first.get_attribute("title") == "right-to-left override"
    drawn = page.evaluate("document.body.innerText")  # every text drawn; raw only in form values
    assert "\u202e" not in drawn and "\u2066" not in drawn
    assert "\\u202e" in c.locator(".labels").inner_text() and "\\u2066" in c.locator(".labels").inner_text()
    sel = f"#{c.get_attribute('id')} .prompt"
    nine, three = page.evaluate(DRAWN_AT, [sel, "9"]), page.evaluate(DRAWN_AT, [sel, "3"])  # 3: in no mark
    assert nine is not None and three is not None and nine < three, "9876-5432 was drawn reordered"


def test_tool_arguments_are_fields_with_long_values_folded_not_cut(page: Any, inbox: Server, park: Park) -> None:
    body = "Same crash as #17. " * 200
    args = {"issue": 42, "comment": body, "path": "rm -rf \u202e~"}
    prompt = json.dumps({"tool": "close_issue", "input": args}, ensure_ascii=False)
    key, _ = park("fields", prompt)
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    names = c.locator(".prompt dl.fields dt").all_inner_texts()
    assert names[:2] == ["tool", "input"] and {"issue", "comment", "path"} <= set(names)
    assert c.locator("dt:text-is('issue') + dd").inner_text() == "42"
    assert c.locator("dt:text-is('path') + dd").inner_text() == "rm -rf \\u202e~"
    fold = c.locator("details.fold")
    assert fold.locator(".more").inner_text().startswith("… show all")
    fold.locator("summary").click()
    assert fold.locator(":scope > .str").inner_text() == body  # the whole value, never cut
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1200, f"a long value widened the page ({width}px)"


def test_an_answer_sent_after_the_session_ended_is_filled_in_again_after_the_login(
    page: Any, inbox: Server, park: Park
) -> None:
    key, q = park("relogin", "Rotate the signing key tonight?")
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    c.locator("textarea").fill("yes, after 22:00 only")
    sid = next(c["value"] for c in page.context.cookies() if c["name"] == "berth_session")
    inbox.auth.logout(sid)  # as a restart or the 12-hour expiry would
    # the live update finds the session gone: the page keeps what was typed and says so
    page.locator("#session-ended").wait_for()
    assert c.locator("textarea").input_value() == "yes, after 22:00 only"
    c.locator("button[value=respond]").click()
    page.wait_for_selector("#token")  # the login page, not a bare 405
    page.fill("#token", ALICE)
    page.click("button[type=submit]")
    notice = page.locator("#notice.error")
    notice.wait_for()
    assert "nothing was recorded" in notice.inner_text()
    assert "filled in again below" in notice.inner_text()
    assert inbox.questions[IDENTITY].answer(key) is None
    c = card(page, key)
    assert c.locator("textarea").input_value() == "yes, after 22:00 only"
    c.locator("button[value=respond]").click()
    page.wait_for_selector(".notice.ok")
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.text == "yes, after 22:00 only" and stored.question_id == q.id


def test_an_expired_question_is_shown_but_not_answerable(page: Any, inbox: Server, park: Park) -> None:
    key, _ = park("expired", "Deploy before the freeze?", deadline=timedelta(seconds=-1))
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}&sort=deadline")
    c = card(page, key)
    assert c.locator(".badge.gone").inner_text() == "expired" and c.locator("form.answer").count() == 0
    assert "never resume" in c.locator(".history").inner_text()
    assert page.locator("#sort").input_value() == "deadline"


def test_an_approver_sees_the_tool_call_as_fields_edits_an_argument_and_approves(
    page: Any, inbox: Server, park: Park
) -> None:
    tool = berth.ToolRequest(
        "archive_email",
        {"email_id": "m-4711", "folder": "Inbox/Old", "notify": True, "tags": ["billing"]},
        agent="mail-assistant",
        description="Moves one email to a folder. See [TICKET-12](https://tickets.example/12) **by the customer**.",
    )
    key, q = park("edit", "Archive the email?", accepts=("approve", "edit", "reject"), tool=tool)
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    assert c.locator(".tool .agent").inner_text() == "mail-assistant"
    assert c.locator(".tool-name").inner_text() == "archive_email"
    assert c.locator(".tool .args dt").all_inner_texts() == ["email_id", "folder", "notify", "tags"]
    assert c.locator(".tool .args dt:text-is('folder') + dd").inner_text() == "Inbox/Old"
    link = c.locator(".description a")
    assert link.inner_text() == "TICKET-12" and link.get_attribute("href") == "https://tickets.example/12"
    assert c.locator(".description strong").inner_text() == "by the customer"
    buttons = c.locator("form.answer button[name=choice]")
    assert [b.get_attribute("value") for b in buttons.all()] == ["approve", "reject", "edit"]
    assert c.locator("button[value=respond]").count() == 0  # accepts no free text
    c.locator("details.edit summary").click()
    c.locator("textarea[data-arg=folder]").fill("Archive/2026")
    c.locator("textarea[data-arg=tags]").fill('["billing", "done"]')
    c.locator("button[value=edit]").click()
    page.wait_for_selector(".notice.ok")
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.question_id == q.id and stored.decision is berth.Decision.EDIT
    assert dict(stored.arguments or {}) == {
        "email_id": "m-4711",
        "folder": "Archive/2026",
        "notify": True,
        "tags": ["billing", "done"],
    }
    done = card(page, key).locator(".answered-by")
    assert (
        done.get_attribute("data-decision") == "edit" and "Approved with edited arguments by alice" in done.inner_text()
    )
    assert done.locator("dt:text-is('folder') + dd").inner_text() == "Archive/2026"
    recent = page.locator("#recent li", has=page.locator("code.key", has_text=key))
    assert recent.get_attribute("data-fate") == "waiting" and "edit by alice" in recent.inner_text()


def test_an_edit_that_is_not_json_records_nothing_and_says_why(page: Any, inbox: Server, park: Park) -> None:
    tool = berth.ToolRequest("refund", {"amount": 420})
    key, _ = park("badjson", "Refund?", accepts=("approve", "edit"), tool=tool)
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    c = card(page, key)
    c.locator("details.edit summary").click()
    c.locator("textarea[data-arg=amount]").fill("42O")
    c.locator("button[value=edit]").click()
    notice = page.locator("#notice.error")
    notice.wait_for()
    assert "amount is not valid JSON" in notice.inner_text() and "Nothing was recorded" in notice.inner_text()
    assert inbox.questions[IDENTITY].answer(key) is None


def test_an_answer_from_a_page_older_than_the_session_is_filled_in_again(page: Any, inbox: Server, park: Park) -> None:
    key, q = park("stale", "Rotate the deploy key?")
    login(page, inbox)
    page.goto(inbox.url + f"/?prefix={park.prefix}")
    page.evaluate("window.berthInbox.pause()")  # this tab does not look while the session changes
    c = card(page, key)
    c.locator("textarea").fill("yes, tonight")
    sid = next(c["value"] for c in page.context.cookies() if c["name"] == "berth_session")
    inbox.auth.logout(sid)  # a restart ...
    other = page.context.new_page()  # ... and a login in another tab: a new session, a new CSRF token
    login(other, inbox)
    other.close()
    c.locator("button[value=respond]").click()
    notice = page.locator("#notice.error")
    notice.wait_for()
    assert "earlier session" in notice.inner_text() and "filled in again below" in notice.inner_text()
    assert inbox.questions[IDENTITY].answer(key) is None
    card(page, key).locator("button[value=respond]").click()
    page.wait_for_selector(".notice.ok")
    stored = inbox.questions[IDENTITY].answer(key)
    assert stored is not None and stored.text == "yes, tonight" and stored.question_id == q.id
