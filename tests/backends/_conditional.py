"""The conditional puts every object or item store backend is checked for at the seam (S3, GCS, DynamoDB, Azure)."""

from __future__ import annotations

import pytest

import berth
from berth.backends import Backend


def check_conditional_puts(backend: Backend, *, foreign_token: berth.Token | None = None) -> None:
    """if_absent once, if_match on the current token only; a gone name and `foreign_token` (another
    backend's kind of token) never match; the last write that held is what is there."""
    token = backend.put("i/k", b"1", if_absent=True)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", b"2", if_absent=True)
    newer = backend.put("i/k", b"2", if_match=token)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", b"3", if_match=token)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/gone", b"3", if_match=token)
    if foreign_token is not None:
        with pytest.raises(berth.TokenMismatch):
            backend.put("i/k", b"3", if_match=foreign_token)
    assert backend.get("i/k") == (b"2", newer)
