"""Credentials out of messages built from URLs, however malformed the URL."""

from __future__ import annotations

import pytest

from berth._redact import redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://alice:pw123@db/app", "postgresql://alice:***@db/app"),
        ("postgresql//alice:pw123@db/app", "postgresql//alice:***@db/app"),  # no ':' after the scheme
        ("postgresql://alice:p%w123@db/app", "postgresql://alice:***@db/app"),
        ("postgresql://alice:p@w/1@db/app", "postgresql://alice:***@db/app"),  # raw '@' and '/'
        ("redis://:pw123@cache:6379/0", "redis://:***@cache:6379/0"),
        ("postgresql://db/app?sslmode=require&password=pw123", "postgresql://db/app?sslmode=require&password=***"),
        ("sqlite:///tmp/a:b@c.db", "sqlite:///tmp/a:b@c.db"),  # an empty authority holds no password
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("not a url at all", "not a url at all"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_hides_the_password_raw_and_decoded_wherever_it_is_quoted() -> None:
    url = "postgresql://alice:s3cr%40t!@db/app"
    message = f'cannot connect to {url}: invalid token "s3cr%40t!" (password s3cr@t!)'
    assert redact_text(message, url) == (
        'cannot connect to postgresql://alice:***@db/app: invalid token "***" (password ***)'
    )
