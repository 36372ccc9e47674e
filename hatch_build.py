"""The long description the package index shows: README.md with its relative links made absolute.

The index renders the README away from the repository, where `docs/store.md` or `docs/inbox.png`
lead nowhere; each relative link or image becomes one into the repository named by the project's
`Source` URL (pyproject.toml), so the page on the index has no broken link. The README in the
repository keeps its relative links (they work on the forge and in an editor). Hatchling runs this
hook when it builds the sdist and the wheel ([tool.hatch.metadata.hooks.custom]);
tests/test_docs.py and tests/test_packaging.py check the result.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

# a Markdown link or image target: `](target)` or `](target "title")`
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")
_ABSOLUTE = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#|/")


def absolute_links(markdown: str, source: str, ref: str = "main") -> str:
    """`markdown` with every relative link or image made absolute into the repository at `source`."""
    source = source.rstrip("/")

    def one(m: re.Match[str]) -> str:
        bang, text, target, title = m.groups()
        if _ABSOLUTE.match(target):
            return m.group(0)
        path = target.removeprefix("./")
        kind = "raw" if bang else "tree" if path.split("#")[0].endswith("/") else "blob"
        return f"{bang}[{text}]({source}/{kind}/{ref}/{path}{title})"

    return _LINK.sub(one, markdown)


class CustomMetadataHook(MetadataHookInterface):
    def update(self, metadata: dict[str, Any]) -> None:
        readme = (Path(self.root) / "README.md").read_text(encoding="utf-8")
        text = absolute_links(readme, metadata["urls"]["Source"])
        metadata["readme"] = {"content-type": "text/markdown", "text": text}
