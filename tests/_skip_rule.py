"""Under CI=true nothing skips except what is allowed here: a pytest plugin, loaded by tests/conftest.py.

The README promises that CI runs every test against real servers. A skip hides a
test as well as a missing assertion does, so under CI=true a skip whose reason
matches none of ALLOWED_UNDER_CI is turned into a failure (a collection error
for a module skipped as a whole), with the reason it gave.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

__all__ = ["ALLOWED_UNDER_CI", "CI", "pytest_make_collect_report", "pytest_runtest_makereport"]

CI = os.environ.get("CI", "").lower() == "true"

ALLOWED_UNDER_CI: dict[str, str] = {
    # pattern of a skip reason: why it may skip in CI
    r"^fake-gcs-server cannot run this case \(.+\); it runs on FakeGcs above$": (
        "a documented emulator limit (tests/backends/test_gcs.py EMULATOR_CANNOT, docs/backends/gcs.md); "
        "the same case runs on the in-repo fake, whose semantics are themselves tested"
    ),
    r"^long reliability trial: run with -m slow": "the long trials are opt-in (`-m slow`), never part of CI",
}


def allowed(reason: str) -> bool:
    """Whether a skip with this reason may happen under CI=true."""
    return any(re.search(pattern, reason) for pattern in ALLOWED_UNDER_CI)


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def _enforce(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not CI or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _reason(report)
    if allowed(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true, which runs everything: {reason!r}. Make the test run (or fail with "
        "tests/conftest.py's `unavailable`), or add a documented limit to tests/_skip_rule.py's ALLOWED_UNDER_CI."
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    _enforce(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield
    _enforce(report)
    return report
