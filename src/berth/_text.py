"""Text from people and from storage, made safe where it lands: a model's context, a terminal, a page.

`visible` is the one rule for anything a person reads (the CLI, the inbox page, notifications):
control, format and invisible characters are written as visible escapes (`\\u202e`), never
applied, so a bidi override cannot reorder what an approver reads.
"""

from __future__ import annotations

import re

__all__ = ["FORMAT_CHARS", "json_terminal_safe", "mark", "terminal_safe", "visible", "visible_parts"]

_FORMAT_RANGES = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
FORMAT_CHARS = re.compile(f"[{_FORMAT_RANGES}]")
"""Every format character (Unicode category Cf): soft hyphen, zero-width spaces and joiners, bidi
controls and isolates, the Arabic letter mark, tag characters. The table is the union over the
Unicode versions Python ships (a test checks it against the running `unicodedata`): building it
from `unicodedata` at import would cost a scan of every code point."""

# Characters that are not format characters but draw nothing, used to make two different texts
# look alike: the combining grapheme joiner, the Hangul fillers, the Khmer inherent vowels and the
# Mongolian free variation selectors.
_INVISIBLE = "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u3164\uffa0"
# C0 and C1 controls and DEL (ESC starts every terminal escape sequence; C1 CSI and OSC start
# them in one byte), format characters (bidi overrides reorder what the operator reads), the
# invisible ones above, and the line and paragraph separators.
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_FORMAT_RANGES}{_INVISIBLE}]")
# The same, where line breaks and tabs are kept (multi-line text: prompts, answers, descriptions).
_UNSAFE_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_FORMAT_RANGES}{_INVISIBLE}]")
# In JSON text, C0 controls are escaped by the encoder already; the rest of `_UNSAFE` is not.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_FORMAT_RANGES}{_INVISIBLE}]")


def mark(char: str) -> str:
    """The visible escape a control, format or invisible character is written as: `\\x1b`, `\\u202e`, `\\U000e0041`."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _json_escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def visible(text: str, *, lines: bool = False) -> str:
    """`text` with every control, format and invisible character written as a visible escape (`\\x1b`, `\\u202e`).

    For anything a person reads that came from storage or from another person: keys, labels,
    run ids, prompts, tool arguments, answers, error messages; on a terminal, the inbox page or
    in a notification. Printable text, any script, is unchanged. `lines=True` keeps line breaks
    and tabs (a CR LF pair becomes one line break) for text shown on several lines.
    """
    if text.isascii() and text.isprintable():  # the common case, at C speed: no control, no format character
        return text
    return "".join(piece for piece, _ in visible_parts(text, lines=lines))


def visible_parts(text: str, *, lines: bool = False) -> list[tuple[str, bool]]:
    """`visible(text, lines=lines)` cut into pieces, each `(text, is_mark)`: for a page that styles the marks."""
    if text.isascii() and text.isprintable():
        return [(text, False)] if text else []
    pattern = _UNSAFE_KEEP_LINES if lines else _UNSAFE
    if lines:
        text = text.replace("\r\n", "\n")
    parts: list[tuple[str, bool]] = []
    at = 0
    for m in pattern.finditer(text):
        if m.start() > at:
            parts.append((text[at : m.start()], False))
        parts.append((mark(m.group()), True))
        at = m.end()
    if at < len(text):
        parts.append((text[at:], False))
    return parts


terminal_safe = visible
"""`visible` under the name the command line has always used."""


def json_terminal_safe(json_text: str) -> str:
    """JSON text that decodes to exactly the same value, with no character a terminal would act on.

    Such characters can only stand inside JSON strings, where `\\uXXXX` means the same character.
    """
    if json_text.isascii() and "\x7f" not in json_text:  # the common case, at C speed
        return json_text
    return _JSON_UNSAFE.sub(_json_escape, json_text)
