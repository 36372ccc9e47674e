"""berth._serve._app: the inbox app as a module (its behaviour over HTTP is the other files' business)."""

from __future__ import annotations

import subprocess
import sys


def test_the_inbox_loads_without_the_command_line() -> None:
    """`berth serve`'s app shares the CLI's formatting through `berth._format`, not through click."""
    code = (
        "import sys, berth._serve._app\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'click' or m.startswith('berth._cli'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []
