"""docs/architecture.md stays true: every module under src/berth is on its map, and nothing else is."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src"


def _modules() -> set[str]:
    return {p.relative_to(SRC).as_posix() for p in (SRC / "berth").rglob("*.py")}


def _mapped() -> set[str]:
    text = DOC.read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(berth/[^`]+\.py)` \|", section, flags=re.M))


def test_every_module_is_on_the_map() -> None:
    missing = sorted(_modules() - _mapped())
    assert not missing, f"add these modules to docs/architecture.md's module map, one line each: {missing}"


def test_the_map_names_no_module_that_does_not_exist() -> None:
    stale = sorted(_mapped() - _modules())
    assert not stale, f"docs/architecture.md's module map names modules that are gone: {stale}"
