"""Framing a human's answer before it goes back into a model's context."""

from __future__ import annotations

import re
import unicodedata

from berth._public import publish
from berth._question_types import Answer
from berth._text import FORMAT_CHARS

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

# What may stand between a delimiter's words once format characters are gone: whitespace and the
# invisible characters that are not format characters (a combining grapheme joiner, variation
# selectors, Hangul fillers, Khmer inherent vowels).
_GAP = r"[\s\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0\ufe00-\ufe0f]*+"
# Brackets a reader may take for the delimiter's (NFKC has already turned fullwidth and small
# forms into ASCII).
_OPENING = "<\u2039\u27e8\u3008\u00ab"
_CLOSING = ">\u203a\u27e9\u3009\u00bb"
# Any spelling of either delimiter, in linear time: a match may start only where a run of
# brackets starts (the lookbehind) and nothing backtracks (possessive), so no run of brackets or
# gap is read more than once, whereas a plain `<+` re-reads a run from every position in it
# (8,000 '<' took seconds). Two matches never overlap.
_DELIMITER = re.compile(
    rf"(?<![{_OPENING}])[{_OPENING}]++{_GAP}(?:begin|end){_GAP}human{_GAP}answer{_GAP}[{_CLOSING}]++",
    re.IGNORECASE,
)
_BROKEN = "\ufffd"
"""What stands where a delimiter was when removing it would join its neighbours into another."""


def _neutralise(text: str) -> str:
    """`text` without delimiters, in linear time.

    Each one is removed. If that joins what surrounded one into another (`<<<END HU` + a delimiter
    + `MAN ANSWER>>>`), a second pass puts `_BROKEN` where each remaining one stands instead: a
    character that is neither a bracket, a gap nor a letter cannot be part of a delimiter, and
    delimiters do not overlap, so nothing can join again.
    """
    text = _DELIMITER.sub("", text)
    if _DELIMITER.search(text):
        text = _DELIMITER.sub(_BROKEN, text)
    return text


def frame_answer(text: str | Answer | None, max_bytes: int | None = DEFAULT_MAX_ANSWER_BYTES) -> str:
    """Wrap a human's answer between fixed delimiters, safe to place in a model's context.

    The answer is cut to `max_bytes` of UTF-8 first (on a character boundary,
    marked with `TRUNCATED`), so the work is bounded whatever its size. Then every
    format character (Unicode category Cf: zero-width, bidi and tag characters)
    is removed and the text NFKC-normalised, so what a model reads is what was
    checked; any delimiter text left, in any case, spacing or bracket look-alike,
    is removed (where removing one would join its neighbours into another, it is
    replaced by U+FFFD instead), so a human cannot close the frame early. All of
    it runs in time linear in the (cut) answer. Surrounding whitespace is trimmed;
    an empty answer (or None) becomes the explicit sentence `NO_ANSWER`.

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
    # Cut first, so that a hostile answer of any size costs no more than `max_bytes` of work. A
    # lone surrogate is not text: it becomes "?" so the frame is always valid UTF-8.
    data = text.lstrip().encode("utf-8", "replace")
    cut = max_bytes is not None and 0 < max_bytes < len(data)
    if cut:
        data = data[:max_bytes]
    # "ignore" drops only the partial character a cut may leave at the end.
    body = data.decode("utf-8", "ignore")
    # What the model reads is what was checked: format characters out, compatibility forms
    # (fullwidth brackets, mathematical letters) to their plain ones, then no delimiter.
    body = FORMAT_CHARS.sub("", unicodedata.normalize("NFKC", FORMAT_CHARS.sub("", body)))
    body = _neutralise(body).strip()
    if max_bytes and len(body.encode("utf-8")) > max_bytes:  # NFKC can lengthen a few characters
        cut = True
        body = body.encode("utf-8")[:max_bytes].decode("utf-8", "ignore").rstrip()
    if not body and not cut:
        body = NO_ANSWER
    elif cut:
        # Cutting only shortens the text and the marker begins with no bracket, so neither can
        # form a delimiter.
        body += TRUNCATED
    return f"{ANSWER_BEGIN}\n{body}\n{ANSWER_END}"


publish(globals())  # its public names read as berth.X
