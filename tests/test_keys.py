"""Key and identity validation."""

from __future__ import annotations

import pytest

import berth
from berth._keys import validate_identity, validate_key
from berth.testing import BAD_IDENTITIES, BAD_KEYS, GOOD_KEYS


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys(key: str) -> None:
    with pytest.raises(berth.InvalidKey) as info:
        validate_key(key, "ident")
    assert isinstance(info.value, ValueError)
    assert "ident" in str(info.value)


@pytest.mark.parametrize("key", GOOD_KEYS)
def test_good_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize("identity", BAD_IDENTITIES)
def test_bad_identities(identity: str) -> None:
    with pytest.raises(berth.InvalidKey):
        validate_identity(identity)


@pytest.mark.parametrize("identity", ["pr-bot", "a", "A.b_c-1", "x" * 128, "..."])
def test_good_identities(identity: str) -> None:
    assert validate_identity(identity) == identity


def test_non_strings_are_refused() -> None:
    for value in (None, 42, b"bytes"):
        with pytest.raises(berth.InvalidKey):
            validate_key(value)
        with pytest.raises(berth.InvalidKey):
            validate_identity(value)


def test_lone_surrogate_is_refused() -> None:
    with pytest.raises(berth.InvalidKey):
        validate_key("a\ud800b")
