"""Credentials out of every message berth builds from a URL, however malformed the URL is."""

from __future__ import annotations

import re

__all__ = ["redact_text", "redact_url"]

_HIDDEN = "***"
# Query parameters that carry a credential (`postgresql://host/db?password=...`).
_SECRET_PARAM = re.compile(
    r"(?i)([?&;](?:password|passwd|pwd|pass|secret|token|sslpassword|access_key|secret_key|secret_access_key)=)"
    r"([^&;#]*)"
)
_SHORTEST_SECRET = 3  # a shorter one cannot be told from ordinary text in a message


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the password of `url` is (from after the first `:` of the userinfo to its `@`), or None.

    Parsed by hand, not with urlsplit: the URLs that most need redacting are the malformed
    ones (no `:` after the scheme, a raw `@`, `/` or `%` in the password). The userinfo runs
    from after `//` (or the start, when there is none) to the last `@` before any `?` or `#`.
    """
    slashes = url.find("//")
    start = slashes + 2 if slashes >= 0 else 0
    end = len(url)
    for stop in "?#":
        found = url.find(stop, start)
        if found >= 0:
            end = min(end, found)
    at = url.rfind("@", start, end)
    if at < 0 or url.startswith("/", start):  # no userinfo, or an empty authority (file:///, sqlite:///)
        return None
    colon = url.find(":", start, at)
    if colon < 0:
        return None
    return colon + 1, at


def redact_url(url: str) -> str:
    """`url` with its password and credential query parameters replaced by `***`.

    Safe on any string: what is not a URL, or holds no credential, comes back unchanged.
    """
    text = str(url)
    span = _userinfo(text)
    if span is not None:
        text = text[: span[0]] + _HIDDEN + text[span[1] :]
    return _SECRET_PARAM.sub(lambda m: m.group(1) + _HIDDEN, text)


def _secrets(url: str) -> set[str]:
    from urllib.parse import unquote  # here: `import berth` stays without urllib (and ipaddress)

    found: set[str] = set()
    span = _userinfo(url)
    if span is not None:
        found.add(url[span[0] : span[1]])
    found.update(m.group(2) for m in _SECRET_PARAM.finditer(url))
    found |= {unquote(s) for s in found}
    return {s for s in found if len(s) >= _SHORTEST_SECRET}


def redact_text(text: str, url: str) -> str:
    """`text` (a message, perhaps a client library's) with `url` and every credential in it redacted.

    Replaces the URL itself, then each password or credential parameter it carries, raw or
    percent-decoded, wherever it appears (client libraries quote parts of a URL in their errors).
    """
    out = str(text)
    if url:
        out = out.replace(url, redact_url(url))
    for secret in sorted(_secrets(url), key=len, reverse=True):
        out = out.replace(secret, _HIDDEN)
    return out
