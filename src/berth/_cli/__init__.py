"""The `berth` command line: see what is parked, answer what waits on a human, clean up.

Built on click (explicit, stable, and it lets one place own every error and exit
code) with rich for tables and progress bars. Exit codes: 0 success, 1 refused
(expired, lost claim, tampered, nothing parked), 2 bad usage or configuration,
69 backend unreachable (docs/cli.md has the whole table).
Every failure is one line on stderr naming the identity and key; `BERTH_DEBUG=1`
adds the traceback.

The package, from the bottom up:

    _failures       exit codes, one-line failures and warnings
    _settings       where the store is and how it is sealed (flags, environment, defaults)
    _output         times, sizes, JSON, tables, progress bars, terminal-safe text
    _app            the `berth` group: shared options, every error and exit code
    _store_cmds     ls, show, park, setup, claim, rm, audit
    _bulk_cmds      sweep, reseal, verify, delete-prefix: walks with progress, --prefix, --after
    _question_cmds  questions, answer
    _key_cmds       keys generate | rotate | show
    _demo_cmd       demo (the narration is _demo)
    _serve_cmd      serve (the inbox app is berth._serve)
    _mcp_cmd        mcp (the server it runs is _mcp_server)

A command group is one module that registers its commands on `_app.cli` when
imported; adding one is that module and a line per command in `_app.COMMANDS`,
which imports each module when its command is first looked up (so `berth --help`
imports none, and `berth ls` the store commands only).
"""

from __future__ import annotations

from berth._cli._app import cli, main

__all__ = ["cli", "main"]
