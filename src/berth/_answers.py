"""Framing a human's answer before it goes back into a model's context."""

from __future__ import annotations

import re

from berth._questions import Answer

__all__ = ["ANSWER_BEGIN", "ANSWER_END", "NO_ANSWER", "TRUNCATED", "frame_answer"]

ANSWER_BEGIN = "<<<BERTH ANSWER BEGIN>>>"
"""The line before the human's answer."""

ANSWER_END = "<<<BERTH ANSWER END>>>"
"""The line after the human's answer."""

NO_ANSWER = "The human gave no answer."
"""What stands between the delimiters when the answer is empty."""

TRUNCATED = "\n[answer truncated by berth]"
"""Appended to an answer cut at `max_bytes`."""

DEFAULT_MAX_ANSWER_BYTES = 16384

# Any spelling of either delimiter: any case; any whitespace, invisible format character or
# none between the words and inside the brackets; any number of ASCII or fullwidth brackets.
_GAP = r"[\s\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]*"
_DELIMITER = re.compile(rf"[<\uff1c]+{_GAP}berth{_GAP}answer{_GAP}(?:begin|end){_GAP}[>\uff1e]+", re.IGNORECASE)


def _strip_delimiters(text: str) -> str:
    # Removing one occurrence can join its neighbours into another ("<<<BERTH AN<<<BERTH ANSWER END>>>SWER
    # END>>>"), so repeat until nothing matches.
    while True:
        stripped = _DELIMITER.sub("", text)
        if stripped == text:
            return text
        text = stripped


def frame_answer(text: str | Answer | None, max_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> str:
    """Wrap a human's answer between fixed delimiters, safe to place in a model's context.

    Any delimiter text inside the answer is removed first, so a human cannot
    close the frame early; the answer is then capped at `max_bytes` of UTF-8 on
    a character boundary, with a truncation marker; an empty answer (or None)
    becomes the explicit sentence `NO_ANSWER`.

    Args:
        text: the answer's text, or an `Answer`, or None for no answer.
        max_bytes: the most UTF-8 bytes the answer may take between the delimiters,
            truncation marker included.

    Returns:
        `ANSWER_BEGIN`, a newline, the answer, a newline, `ANSWER_END`.

    Raises:
        TypeError: `text` is not a str, an Answer or None.
        ValueError: `max_bytes` is too small to hold the truncation marker or `NO_ANSWER`.
    """
    if isinstance(text, Answer):
        text = text.text
    elif text is None:
        text = ""
    elif not isinstance(text, str):
        raise TypeError(f"frame_answer takes a str or a berth.Answer, got {type(text).__name__}")
    floor = max(len(TRUNCATED.encode()), len(NO_ANSWER.encode())) + 4
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < floor:
        raise ValueError(f"max_bytes must be an int of at least {floor}, got {max_bytes!r}")
    # A lone surrogate is not text: it becomes "?" so the frame is always valid UTF-8.
    body = _strip_delimiters(text.encode("utf-8", "replace").decode("utf-8"))
    if not body.strip():
        body = NO_ANSWER
    data = body.encode("utf-8")
    if len(data) > max_bytes:
        cut = max_bytes - len(TRUNCATED.encode())
        # "ignore" drops only the partial character the cut may leave at the end.
        body = data[:cut].decode("utf-8", "ignore") + TRUNCATED
    return f"{ANSWER_BEGIN}\n{body}\n{ANSWER_END}"
