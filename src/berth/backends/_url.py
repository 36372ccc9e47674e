"""berth's own options out of a backend URL's query, the rest of the query left for the client."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from berth._errors import BerthError

__all__ = ["own_options"]


def own_options(url: str, known: Mapping[str, Callable[[str], Any]], options: dict[str, Any], backend: str) -> str:
    """`url` without the query parameters `known` names, each converted into `options` (a keyword
    given by the caller wins); the others stay exactly as written (the client's: libpq, redis-py)."""
    parts = urlsplit(url)
    kept = []
    for item in parts.query.split("&") if parts.query else []:
        raw_key, _, raw_value = item.partition("=")
        key, value = unquote(raw_key), unquote(raw_value)
        convert = known.get(key)
        if convert is None:
            kept.append(item)
            continue
        try:
            options.setdefault(key, convert(value))
        except ValueError:
            raise BerthError(f"{backend} URL option {key}={value!r} is not valid") from None
    return urlunsplit(parts._replace(query="&".join(kept)))
