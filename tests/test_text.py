"""Terminal-safe text and JSON: controls and format characters visible, JSON values exact."""

from __future__ import annotations

import json

from berth._text import json_terminal_safe, terminal_safe, visible


def test_terminal_safe_escapes_controls_and_format_characters_only() -> None:
    assert terminal_safe("\x1b]52;c;aGk=\x07 \x9b2J \u202eabc\x7f") == "\\x1b]52;c;aGk=\\x07 \\x9b2J \\u202eabc\\x7f"
    assert terminal_safe("\U000e0041") == "\\U000e0041"
    assert terminal_safe("plain, é, 中文, emoji 😀") == "plain, é, 中文, emoji 😀"


def test_json_terminal_safe_decodes_to_the_same_value() -> None:
    value = {"k\u202e": ["\x9b\x7f\u2028", "\U000e0041 tag", "é"]}
    text = json_terminal_safe(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value
    assert not any(c in text for c in "\x9b\x7f\u2028\u202e\U000e0041") and "é" in text


def test_visible_marks_bidi_and_invisible_characters_and_keeps_lines_when_asked() -> None:
    from berth._text import visible_parts

    assert visible("account \u202e9876-5432\u202c") == "account \\u202e9876-5432\\u202c"
    # not format characters, yet they draw nothing: Hangul filler, combining grapheme joiner
    assert visible("ok\u3164\u034f") == "ok\\u3164\\u034f"
    assert visible("a\r\nb\tc\u2028") == "a\\x0d\\x0ab\\x09c\\u2028"
    assert visible("a\r\nb\tc\u2028\x1b", lines=True) == "a\nb\tc\\u2028\\x1b"
    assert visible_parts("x\u2066y", lines=True) == [("x", False), ("\\u2066", True), ("y", False)]
    assert visible_parts("") == [] and visible_parts("plain") == [("plain", False)]
    assert terminal_safe is visible
