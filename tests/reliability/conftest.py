"""The reliability suite: `slow` trials run only when asked for (`pytest -m slow`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gcs import FakeGcs

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this directory's `slow` tests unless the marker expression names `slow`."""
    if "slow" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="long reliability trial: run with -m slow (or scripts/reliability.py)")
    for item in items:
        if "slow" in item.keywords and _HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def fake_gcs() -> Iterator[FakeGcs]:
    """The in-process Cloud Storage fake (it honours the preconditions fake-gcs-server ignores)."""
    with FakeGcs() as fake:
        yield fake
