"""The `berth` command line's conventions (issue 34): pipes, exit codes, JSON on every outcome,
completion, suggestions, number format. The fixtures and helpers are tests/test_cli.py's."""
