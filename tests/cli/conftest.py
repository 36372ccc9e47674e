"""tests/test_cli.py's fixtures, for the command-line tests in this directory."""

from __future__ import annotations

from tests.test_cli import home, questions, store

__all__ = ["home", "questions", "store"]
