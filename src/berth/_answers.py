"""Framing a human's answer before it goes back into a model's context."""

from __future__ import annotations

import re

from berth._questions import Answer

__all__ = ["ANSWER_BEGIN", "ANSWER_END", "NO_ANSWER", "TRUNCATED", "frame_answer"]

ANSWER_BEGIN = "<<<BEGIN HUMAN ANSWER>>>"
"""The line before the human's answer."""

ANSWER_END = "<<<END HUMAN ANSWER>>>"
"""The line after the human's answer."""

NO_ANSWER = "(no answer: the human did not provide an answer)"
"""What stands between the delimiters when the answer is empty: never an empty tool result."""

TRUNCATED = "…[truncated]"
"""Appended to an answer cut at `max_bytes`."""

DEFAULT_MAX_ANSWER_BYTES = 16384

# Any spelling of either delimiter: any case; any whitespace, invisible format character or
# none between the words and inside the brackets; any number of ASCII or fullwidth brackets.
_GAP = r"[\s\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]*"
_DELIMITER = re.compile(
    rf"[<\uff1c]+{_GAP}(?:begin|end){_GAP}human{_GAP}answer{_GAP}[>\uff1e]+",
    re.IGNORECASE,
)


def _strip_delimiters(text: str) -> str:
    # Removing one occurrence can join its neighbours into another ("<<<BERTH AN<<<BERTH ANSWER END>>>SWER
    # END>>>"), so repeat until nothing matches.
    while True:
        stripped = _DELIMITER.sub("", text)
        if stripped == text:
            return text
        text = stripped


def frame_answer(text: str | Answer | None, max_bytes: int | None = DEFAULT_MAX_ANSWER_BYTES) -> str:
    """Wrap a human's answer between fixed delimiters, safe to place in a model's context.

    Any delimiter text inside the answer is removed first (repeatedly, so the
    pieces cannot reassemble one), so a human cannot close the frame early;
    surrounding whitespace is trimmed; an empty answer (or None) becomes the
    explicit sentence `NO_ANSWER`; a longer answer is cut to `max_bytes` of
    UTF-8 on a character boundary and marked with `TRUNCATED`.

    Args:
        text: the answer's text, or an `Answer`, or None for no answer.
        max_bytes: the most UTF-8 bytes of the answer kept (the marker comes on top);
            None or 0 keeps it whole.

    Returns:
        `ANSWER_BEGIN`, a newline, the answer, a newline, `ANSWER_END`.

    Raises:
        TypeError: `text` is not a str, an Answer or None; `max_bytes` is not an int or None.
        ValueError: `max_bytes` is negative.
    """
    if isinstance(text, Answer):
        text = text.text
    elif text is None:
        text = ""
    elif not isinstance(text, str):
        raise TypeError(f"frame_answer takes a str or a berth.Answer, got {type(text).__name__}")
    if max_bytes is not None and (not isinstance(max_bytes, int) or isinstance(max_bytes, bool)):
        raise TypeError(f"max_bytes must be an int or None, got {type(max_bytes).__name__}")
    if max_bytes is not None and max_bytes < 0:
        raise ValueError(f"max_bytes cannot be negative, got {max_bytes}")
    # A lone surrogate is not text: it becomes "?" so the frame is always valid UTF-8.
    body = _strip_delimiters(text.encode("utf-8", "replace").decode("utf-8")).strip()
    if not body:
        body = NO_ANSWER
    elif max_bytes:
        data = body.encode("utf-8")
        if len(data) > max_bytes:
            # "ignore" drops only the partial character the cut may leave at the end. Cutting
            # only shortens the text, so it cannot form a delimiter.
            body = data[:max_bytes].decode("utf-8", "ignore") + TRUNCATED
    return f"{ANSWER_BEGIN}\n{body}\n{ANSWER_END}"
