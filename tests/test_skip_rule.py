"""Under CI=true a skip fails the run unless it is a documented limit (tests/_skip_rule.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _skip_rule

ROOT = Path(__file__).resolve().parent.parent

CASES = """
import pytest

def test_server_missing():
    pytest.skip("no server here")

def test_emulator_limit():
    pytest.skip("fake-gcs-server cannot run this case (it cannot); it runs on FakeGcs above")

def test_runs():
    assert True
"""
MODULE_SKIP = """
import pytest

pytest.importorskip("berth_tests_no_such_client")

def test_never_collected():
    pass
"""


def _run(tmp_path: Path, ci: str, *more: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    args = ["-p", "tests._skip_rule", "-p", "no:cacheprovider", "-rA", "--continue-on-collection-errors", *more]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# ./dev test runs the whole suite in xdist workers: the rule holds in each of them
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
def test_under_ci_a_skip_fails_unless_it_is_an_allowed_limit(tmp_path: Path, workers: list[str]) -> None:
    result = _run(tmp_path, "true", *workers)
    assert not workers or "created: 2/2 workers" in result.stdout, result.stdout
    assert result.returncode != 0, result.stdout
    assert "FAILED test_cases.py::test_server_missing" in result.stdout
    assert "skipped under CI=true" in result.stdout and "no server here" in result.stdout
    assert "SKIPPED [1] test_cases.py" in result.stdout and "fake-gcs-server cannot run" in result.stdout
    assert "PASSED test_cases.py::test_runs" in result.stdout
    assert "ERROR test_module_skip.py" in result.stdout, "a module skipped as a whole is a collection error"


def test_outside_ci_skips_stay_skips(tmp_path: Path) -> None:
    result = _run(tmp_path, "")
    assert result.returncode == 0, result.stdout
    assert "1 passed, 3 skipped" in result.stdout


def test_this_session_enforces_the_rule(request: pytest.FixtureRequest) -> None:
    hooks = [getattr(p, "pytest_runtest_makereport", None) for p in request.config.pluginmanager.get_plugins()]
    assert _skip_rule.pytest_runtest_makereport in hooks
    collect = [getattr(p, "pytest_make_collect_report", None) for p in request.config.pluginmanager.get_plugins()]
    assert _skip_rule.pytest_make_collect_report in collect


def test_the_allowed_reasons_are_the_ones_the_suite_gives() -> None:
    from tests.backends.test_gcs import EMULATOR_CANNOT, LONG_SEGMENT

    for reason in [*EMULATOR_CANNOT.values(), LONG_SEGMENT]:
        assert _skip_rule.allowed(f"fake-gcs-server cannot run this case ({reason}); it runs on FakeGcs above")
    assert _skip_rule.allowed("long reliability trial: run with -m slow (or scripts/reliability.py)")
    assert not _skip_rule.allowed("PostgreSQL is not available (connection refused)")


def test_the_processes_tests_start_are_not_measured() -> None:
    # ./dev test (CI) starts coverage in every pytest process through COVERAGE_PROCESS_START;
    # tests/conftest.py drops it where tests run, so a CLI run or a server they start is not measured
    assert "COVERAGE_PROCESS_START" not in os.environ
