"""`python -m berth`: the `berth` command line, where the console script is not on PATH."""

from __future__ import annotations

from berth._cli import main

if __name__ == "__main__":
    main()
