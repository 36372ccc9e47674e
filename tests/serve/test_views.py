"""How the inbox shows text: visible marks for controls, arguments as fields, a safe Markdown subset."""

from __future__ import annotations

import pytest

pytest.importorskip("jinja2", reason="the serve extra is not installed: ./dev test installs it")

from berth._serve._views import fields, link, linked, markdown, prompt_json, shown  # noqa: E402


def test_shown_escapes_html_and_marks_every_control_never_applying_it() -> None:
    html = str(shown("account \u202e9876-5432\u202c <b>"))
    assert "\u202e" not in html and "\u202c" not in html and "<b>" not in html
    assert '<span class="ctl" title="right-to-left override">\\u202e</span>9876-5432' in html
    assert html.endswith("&lt;b&gt;")
    assert str(shown("a\nb\u3164", lines=True)) == 'a\nb<span class="ctl" title="hangul filler">\\u3164</span>'
    assert "\n" not in str(shown("a\nb"))


def test_links_are_http_or_https_only_and_readable_as_written() -> None:
    assert link("https://github.com/org/repo/pull/42") == "https://github.com/org/repo/pull/42"
    for bad in ("javascript:alert(1)", "data:text/html,x", "//evil.example", "https://ex\u202eample.com", "http://"):
        assert link(bad) is None, bad
    assert 'href="https://t.example/8812"' in str(linked("https://t.example/8812"))
    assert "<a" not in str(linked("javascript:alert(1)"))


def test_markdown_subset_escapes_everything_and_links_only_to_http() -> None:
    html = str(
        markdown(
            "Closes **#42**, see [the PR](https://github.com/o/r/pull/42) and https://t.example/1.\n"
            "`rm -rf ~` is *not* run\n\n- one\n- two <script>\n\n1. first\n\n"
            "[click](javascript:alert(1)) <img src=x onerror=alert(1)>\n\n```\ncode <b>\n```\n# Title"
        )
    )
    assert "<strong>#42</strong>" in html and "<em>not</em>" in html and "<code>rm -rf ~</code>" in html
    anchor = '<a href="https://github.com/o/r/pull/42" rel="noopener noreferrer nofollow" target="_blank">'
    assert anchor + "the PR</a>" in html
    assert '<a href="https://t.example/1"' in html and "1</a>." in html  # the full stop is not part of the link
    assert "<ul><li>one</li><li>two &lt;script&gt;</li></ul>" in html and "<ol><li>first</li></ol>" in html
    assert 'href="javascript' not in html and "<img" not in html and "&lt;img" in html
    assert "<pre><code>code &lt;b&gt;</code></pre>" in html and "<strong>Title</strong>" in html
    assert "\\u202e" in str(markdown("see \u202eevil"))


def test_arguments_are_fields_long_values_folded_never_cut() -> None:
    long = "x" * 5000
    html = str(fields({"path": "~/\u202e", "n": 3, "ok": True, "nested": {"a": [1, None]}, "body": long, "e": {}}))
    assert "<dt>path</dt>" in html and "\\u202e" in html and "\u202e" not in html
    assert '<span class="num">3</span>' in html and '<span class="lit">true</span>' in html
    assert '<ol class="items" start="0"><li><span class="num">1</span></li><li><span class="lit">null</span>' in html
    assert '<details class="fold">' in html and long in html  # the whole value is there
    assert prompt_json('{"tool": "close_issue"}') is not None and prompt_json("Push it?") is None


def test_a_card_changes_version_when_it_expires_so_a_live_page_takes_its_form_away() -> None:
    from datetime import datetime, timedelta, timezone

    import berth
    from berth._serve._inbox import Card, Item
    from berth._serve._views import version

    now = datetime.now(timezone.utc)
    item = Item("ops", "k", "r", now, now + timedelta(seconds=30), {}, "t")
    card = Card(item, berth.Question("q1", "k", "r", "?", now), None)
    assert version(card, now) == "q1:open"
    assert version(card, now + timedelta(minutes=1)) == "q1:open:expired"
