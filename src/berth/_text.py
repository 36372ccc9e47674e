"""Text from people and from storage, made safe where it lands: a model's context or a terminal."""

from __future__ import annotations

import re

__all__ = ["FORMAT_CHARS", "json_terminal_safe", "terminal_safe"]

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

# C0 and C1 controls and DEL (ESC starts every terminal escape sequence; C1 CSI and OSC start
# them in one byte), format characters (bidi overrides reorder what the operator reads), and the
# line and paragraph separators.
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_FORMAT_RANGES}]")
# In JSON text, C0 controls are escaped by the encoder already; the rest of `_UNSAFE` is not.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_FORMAT_RANGES}]")


def _visible(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _json_escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def terminal_safe(text: str) -> str:
    """`text` with every control and format character written as a visible escape (`\\x1b`, `\\u202e`).

    For anything that reaches a terminal from storage or from another person: keys, labels,
    run ids, prompts, error messages. Printable text, any script, is unchanged.
    """
    if text.isascii() and text.isprintable():  # the common case, at C speed: no control, no format character
        return text
    return _UNSAFE.sub(_visible, text)


def json_terminal_safe(json_text: str) -> str:
    """JSON text that decodes to exactly the same value, with no character a terminal would act on.

    Such characters can only stand inside JSON strings, where `\\uXXXX` means the same character.
    """
    if json_text.isascii() and "\x7f" not in json_text:  # the common case, at C speed
        return json_text
    return _JSON_UNSAFE.sub(_json_escape, json_text)
