"""The distribution is `berthing` (DESIGN.md, "Distribution"): the index's `berth` is an unrelated project.

Every install hint the repository prints or documents names `berthing`, the metadata lookups ask for
`berthing`, and the long description the index renders has no relative link (hatch_build.py). The
built wheel's metadata is checked in tests/test_packaging.py.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import berth

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# an install of the distribution spelled with the import name (pip install, a quoted name with extras);
# the hints it catches are listed in test_the_spelling_check_catches_the_old_hints
_NAME = "ber" + "th"  # not spelled whole, so this file does not match itself
OLD_SPELLING = re.compile(
    rf"pip3? install\s+(?:-\S+\s+)*['\"]?{_NAME}(?![\w-])|[\"'`]{_NAME}\[",
)


# what the repository writes for people: the package, docs, examples, tests, scripts and project files
SCANNED = ["src", "docs", "examples", "tests", "scripts", "benchmarks", ".ci", "README.md", "CONTRIBUTING.md"]
SCANNED += ["CHANGELOG.md", "SECURITY.md", "pyproject.toml", "dev", "hatch_build.py", ".pre-commit-config.yaml"]
BINARY = {".png", ".frame", ".ico", ".woff2", ".gz", ".pyc", ".jpg", ".svg"}


def _text_files() -> list[Path]:
    found = []
    for name in SCANNED:
        top = ROOT / name
        for path in [top] if top.is_file() else top.rglob("*"):
            if path.is_file() and path.suffix not in BINARY and "__pycache__" not in path.parts:
                found.append(path)
    return found


def test_the_spelling_check_catches_the_old_hints() -> None:
    for hint in [
        f"pip install {_NAME}",
        f"pip install '{_NAME}[postgres]'",
        f'pip install "{_NAME}[s3]"',
        f"pip install -U {_NAME}",
        f"needs the boto3 package: pip install '{_NAME}[awskms]'",
        f'all = ["{_NAME}[postgres,redis]"]',
    ]:
        assert OLD_SPELLING.search(hint), hint
    for fine in ["pip install berthing", "pip install 'berthing[postgres]'", "pip install -e '.[all]'", "berth demo"]:
        assert not OLD_SPELLING.search(fine), fine


def test_no_install_hint_names_the_other_project() -> None:
    found = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OLD_SPELLING.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "install hints naming the index's unrelated `berth` (write berthing):\n" + "\n".join(found)


def test_the_distribution_is_berthing_and_installs_berth() -> None:
    assert PYPROJECT["project"]["name"] == "berthing"
    assert PYPROJECT["project"]["scripts"] == {"berth": "berth._cli:main"}
    assert importlib.metadata.version("berthing") == berth.__version__
    assert Path(berth.__file__).parent.name == "berth"
    urls = PYPROJECT["project"]["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in PYPROJECT["project"]["classifiers"])


def _hatch_build() -> Any:
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_long_description_has_no_relative_link() -> None:
    source = PYPROJECT["project"]["urls"]["Source"]
    readme = (ROOT / "README.md").read_text()
    relative = re.findall(r"\]\((?![a-z]+:|#)([^)\s]+)", readme)
    assert relative, "the README links its docs relatively (they work on the forge); the hook rewrites them"
    for target in relative:  # each relative link leads to a file of the repository
        assert (ROOT / target.split("#")[0]).exists(), target
    described = _hatch_build().absolute_links(readme, source)
    assert re.findall(r"\]\((?!https://|#)([^)\s]+)", described) == []
    assert f"]({source}/blob/main/docs/store.md#the-witness)" in described
    assert f"]({source}/raw/main/docs/inbox.png)" in described
    assert f"]({source}/tree/main/docs/backends/)" in described


def test_berth_testing_without_pytest_names_its_extra() -> None:
    code = "import sys; sys.modules['pytest'] = None\nimport berth.testing"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == "ImportError: berth.testing needs pytest: pip install 'berthing[testing]'", done.stderr
