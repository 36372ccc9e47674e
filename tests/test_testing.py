"""The conformance suite catches broken backends (it would be worthless if it passed them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BROKEN = {
    "delete_ignores_token": (
        """
        def delete(self, name, token):
            with self._lock:
                if name not in self._data:
                    raise TokenMismatch(name)
                del self._data[name]
        """,
        {"test_resave_supersedes_and_invalidates_old_tokens", "test_save_racing_a_sweep_survives"},
    ),
    "resave_keeps_generation": (
        """
        def put(self, name, data, *, if_match=None, if_absent=False):
            with self._lock:
                current = self._data.get(name)
                gen = current[1] if current else self._next()
                self._data[name] = (bytes(data), gen)
                return Token(gen)

        def _next(self):
            self._gen += 1
            return self._gen
        """,
        {"test_resave_supersedes_and_invalidates_old_tokens", "test_save_racing_a_sweep_survives"},
    ),
    "conditional_put_ignored": (
        """
        def put(self, name, data, *, if_match=None, if_absent=False):
            return super().put(name, data)
        """,
        {"test_reseal_loses_to_a_concurrent_save"},
    ),
    "scan_ignores_prefix": (
        """
        def scan(self, prefix):
            with self._lock:
                return iter(sorted(self._data))
        """,
        {"test_list_streams_headers", "test_identities_are_separate_namespaces"},
    ),
}


@pytest.mark.parametrize("flaw", sorted(BROKEN))
def test_contract_fails_a_broken_backend(flaw: str, tmp_path: Path) -> None:
    body, must_fail = BROKEN[flaw]
    module = tmp_path / f"test_broken_{flaw}.py"
    module.write_text(
        textwrap.dedent(
            """
            import pytest
            from berth import Token, TokenMismatch
            from berth.backends.memory import MemoryBackend
            from berth.testing import StoreContract

            class Broken(MemoryBackend):
            {body}

            _shared = {{}}

            class TestBroken(StoreContract):
                cross_process = False

                @pytest.fixture
                def backend_opener(self, request):
                    backend = _shared.setdefault(request.node.nodeid, Broken())
                    return lambda: backend
            """
        ).format(body=textwrap.indent(textwrap.dedent(body), "    "))
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider", "-W", "ignore"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    failed = set(re.findall(r"FAILED \S+::TestBroken::(\w+)", result.stdout))
    assert result.returncode == 1, result.stdout[-2000:]
    assert must_fail <= failed, f"expected {sorted(must_fail - failed)} to fail; failed: {sorted(failed)}"


def test_unoverridden_fixture_says_what_to_do(tmp_path: Path) -> None:
    module = tmp_path / "test_unconfigured.py"
    module.write_text("from berth.testing import StoreContract\n\nclass TestMine(StoreContract):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider", "-x", "-W", "ignore"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 1
    assert "override the backend_opener fixture" in result.stdout


def test_docs_contract_names_every_case_of_the_suite() -> None:
    """docs/contract.md is the contract in the project's words: it keeps in step with StoreContract."""
    from berth.testing import StoreContract

    page = (ROOT / "docs" / "contract.md").read_text()
    cases = {name for name in dir(StoreContract) if name.startswith("test_")}
    named = set(re.findall(r"`(test_\w+)`", page))
    assert cases - named == set(), f"docs/contract.md does not say what these cases hold: {sorted(cases - named)}"
    assert named - cases == set(), f"docs/contract.md names cases that do not exist: {sorted(named - cases)}"
