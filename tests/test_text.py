"""Terminal-safe text and JSON: controls and format characters visible, JSON values exact."""

from __future__ import annotations

import json

from berth._text import json_terminal_safe, terminal_safe


def test_terminal_safe_escapes_controls_and_format_characters_only() -> None:
    assert terminal_safe("\x1b]52;c;aGk=\x07 \x9b2J \u202eabc\x7f") == "\\x1b]52;c;aGk=\\x07 \\x9b2J \\u202eabc\\x7f"
    assert terminal_safe("\U000e0041") == "\\U000e0041"
    assert terminal_safe("plain, é, 中文, emoji 😀") == "plain, é, 中文, emoji 😀"


def test_json_terminal_safe_decodes_to_the_same_value() -> None:
    value = {"k\u202e": ["\x9b\x7f\u2028", "\U000e0041 tag", "é"]}
    text = json_terminal_safe(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value
    assert not any(c in text for c in "\x9b\x7f\u2028\u202e\U000e0041") and "é" in text
