"""Fixtures for the sealer tests: a call-counting KMS, AWS credentials for moto, a moto KMS key."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import pytest

from berth.kms import Kms, Wrapped

REGION = "us-east-1"


class CountingKms:
    """Wraps a KMS client and counts wrap/unwrap calls; picklable when the inner client is."""

    def __init__(self, inner: Kms):
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()
        self.contexts: list[dict[str, str]] = []

    @property
    def key_id(self) -> str:
        return self.inner.key_id

    def holds(self, key_id: str) -> bool:
        return self.inner.holds(key_id)

    def wrap(self, data_key: bytes, *, context: Mapping[str, str]) -> Wrapped:
        self.calls["wrap"] += 1
        self.contexts.append(dict(context))
        return self.inner.wrap(data_key, context=context)

    def unwrap(self, wrapped: Wrapped, *, context: Mapping[str, str]) -> bytes:
        self.calls["unwrap"] += 1
        self.contexts.append(dict(context))
        return self.inner.unwrap(wrapped, context=context)

    def __repr__(self) -> str:
        return f"CountingKms({self.inner!r})"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, moto_url: str) -> str:
    """Fake credentials for moto in the environment (inherited by spawned processes); returns moto's URL."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    return moto_url


@pytest.fixture
def kms_admin(aws_env: str) -> Any:
    """A plain boto3 KMS client on moto, for creating keys and aliases."""
    import boto3

    return boto3.session.Session().client("kms", region_name=REGION, endpoint_url=aws_env)


@pytest.fixture
def aws_key(kms_admin: Any) -> str:
    """The ARN of a fresh symmetric KMS key on moto."""
    return str(kms_admin.create_key(Description="berth test KEK")["KeyMetadata"]["Arn"])


def count_aws_calls(client: Any) -> collections.Counter[str]:
    """Count every KMS API call the boto3 `client` makes, by operation name."""
    counts: collections.Counter[str] = collections.Counter()

    def hook(model: Any, **_: Any) -> None:
        counts[model.name] += 1

    client.meta.events.register("before-call.kms", hook)
    return counts
