"""The documentation site builds in strict mode (a broken link, a page missing or an API reference
that cannot be rendered fails), and the project files a newcomer looks for exist and are linked from
the README. That every public name has a reference entry is checked in tests/test_public_api.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT_FILES = ["LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"]


def test_readme_links_the_project_files() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in PROJECT_FILES:
        assert (ROOT / name).is_file(), name
        assert f"]({name})" in readme, f"README.md does not link {name}"
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert re.search(r"^## Unreleased$", (ROOT / "CHANGELOG.md").read_text(), re.M), "CHANGELOG.md: no Unreleased"


@pytest.mark.docs
def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    # the reference is rendered from the docstrings, not left as `:::` lines
    store = (site / "reference" / "store" / "index.html").read_text()
    assert 'id="berth.Store.claim"' in store and ":::" not in store
    assert 'id="berth.Store.load_prefix"' in store  # the ordered load, with its docstring's Args and Raises
    backends = (site / "reference" / "backends" / "index.html").read_text()
    assert 'id="berth.Backend.sorted_frames"' in backends
    aio = (site / "reference" / "aio" / "index.html").read_text()
    assert 'id="berth.aio.AsyncStore.load_prefix"' in aio and 'id="berth.aio.AsyncBackend.sorted_frames"' in aio
    assert "Apache License" in (site / "license" / "index.html").read_text()
    assert "Unreleased" in (site / "changelog" / "index.html").read_text()


_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b")
_OUTSIDE = re.compile(r"(?<![\w.])(/work/|\.\./\.\./|shared/reference)")


def test_docs_point_only_at_files_in_the_repository() -> None:
    """A reader has the repository, nothing beside it: every relative link resolves inside it, every
    `NAME.md` a doc names is one of its files, and no doc cites a path of the machine it was written on."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    names = {Path(p).name for p in tracked}
    places = {str(Path(p).parent) for p in tracked} | set(tracked)
    docs = [
        "README.md",
        "CONTRIBUTING.md",
        "SECURITY.md",
        *(p for p in tracked if p.startswith("docs/") and p.endswith(".md")),
    ]
    found = []
    for doc in docs:
        text = (ROOT / doc).read_text()
        for link in _LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", link) or link.startswith("/"):
                continue  # a URL; a site-absolute link is mkdocs' to check
            target = os.path.normpath(os.path.join(os.path.dirname(doc), link))
            if target.startswith("..") or target.rstrip("/") not in places:
                found.append(f"{doc}: link {link}")
        for name in _MD_NAME.findall(text):
            if Path(name).name not in names:
                found.append(f"{doc}: names {name}, not a file of the repository")
        found += [f"{doc}: cites {m}" for m in _OUTSIDE.findall(text)]
    assert not found, "\n".join(found)
