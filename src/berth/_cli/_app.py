"""The `berth` group: shared options, and the one place that owns every error and exit code."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

import berth
from berth._cli._failures import (
    INTERRUPTED,
    NOT_FOUND,
    OK,
    PIPE_CLOSED,
    REFUSED,
    UNAVAILABLE,
    USAGE,
    Failure,
    OpenArray,
    PipeClosed,
    log_to_stderr,
    one_line,
    show_warning,
    terminal_columns,
    unreachable,
)
from berth._cli._settings import Settings
from berth._errors import StoreMissing, where

__all__ = ["COMMANDS", "CONTEXT", "Group", "cli", "main", "output_options", "store_options"]

COMMANDS: dict[str, tuple[str, str]] = {
    "answer": ("_question_cmds", "Answer the question the run parked under KEY is waiting on."),
    "audit": ("_store_cmds", "Compare every frame with the witness: find deleted, replayed and unknown runs."),
    "claim": ("_store_cmds", "Take the envelope under KEY: exactly one claimer gets it."),
    "delete-prefix": ("_bulk_cmds", "Remove every envelope whose key starts with --prefix (needs no key)."),
    "demo": ("_demo_cmd", "The whole job in seconds: park, answer, race, tamper, expire."),
    "keys": ("_key_cmds", "Create, rotate and inspect keyring files (AES-256-GCM keys)."),
    "mcp": ("_mcp_cmd", "Serve the questions to approvers' own MCP clients."),
    "ls": ("_store_cmds", "List what is parked, from frame headers (needs no key)."),
    "park": ("_store_cmds", "Seal and park a run's state under KEY (replacing what was there)."),
    "questions": ("_question_cmds", "List the questions parked runs wait on, with deadlines."),
    "reseal": ("_bulk_cmds", "Re-seal every envelope not sealed by the current key."),
    "rm": ("_store_cmds", "Claim the envelope under KEY and discard it."),
    "serve": ("_serve_cmd", "Serve the inbox: a web page and JSON API where people answer parked runs."),
    "setup": ("_store_cmds", "Create the store at --url: its directory, database file or tables."),
    "show": ("_store_cmds", "Open one parked envelope and print it (expired ones too)."),
    "sweep": ("_bulk_cmds", "Remove every envelope past its deadline (needs no key)."),
    "verify": ("_bulk_cmds", "Open every frame; count ok, expired, tampered, unknown key."),
}
"""Every command of `berth`: the module under berth._cli that defines it (importing the module
registers its commands on `cli`) and the first line of its help. So `berth --help` lists every
command without importing one, and `berth ls` imports the store commands only (pip keeps its
command table the same way). tests/test_cli.py checks each line against the command's own help."""

_F = TypeVar("_F", bound=Callable[..., Any])


def _set(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            setattr(ctx.ensure_object(Settings), attr, value)

    return callback


def store_options(*, env: bool) -> Callable[[_F], _F]:
    """`--url`, `--identity`, `--keyring`: on the group (with their environment variables) and on each command."""

    def envvar(name: str) -> str | None:
        return name if env else None

    def decorate(f: _F) -> _F:
        opts = [
            click.option(
                "--url",
                metavar="URL",
                envvar=envvar("BERTH_URL"),
                show_envvar=env,
                expose_value=False,
                callback=_set("url"),
                help="Store URL (default: an SQLite file in the user data directory).",
            ),
            click.option(
                "--identity",
                metavar="NAME",
                envvar=envvar("BERTH_IDENTITY"),
                show_envvar=env,
                expose_value=False,
                callback=_set("identity"),
                help="Namespace of the agent or tenant (default: default).",
            ),
            click.option(
                "--keyring",
                metavar="PATH",
                expose_value=False,
                callback=_set("keyring"),
                help="Keyring file that seals the store (AES-256-GCM); or set BERTH_KEYRING, or BERTH_KMS.",
            ),
            click.option(
                "--witness",
                metavar="URL",
                envvar=envvar("BERTH_WITNESS"),
                show_envvar=env,
                expose_value=False,
                callback=_set("witness"),
                help="Witness URL: where berth records each key's latest frame (needs the keys; see berth audit).",
            ),
        ]
        for opt in reversed(opts):
            f = opt(f)
        return f

    return decorate


def output_options(*, stream: bool = False) -> Callable[[_F], _F]:
    """`--json` (one document), and `--jsonl` (one object a line) where the command streams."""

    def decorate(f: _F) -> _F:
        if stream:
            f = click.option("--jsonl", "out", flag_value="jsonl", help="One JSON object per line, streamed.")(f)
        return click.option("--json", "out", flag_value="json", help="One JSON document for scripts.")(f)

    return decorate


class Group(click.Group):
    """The `berth` group: owns every error and exit code, so no traceback reaches a user.

    `lazy` names commands by the module that registers them (`COMMANDS`): each is imported when
    its command is first looked up, and the help lists them from the table alone.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, loaded or not."""
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its module imported first if it is not yet."""
        if cmd_name not in self.commands and cmd_name in self.lazy:
            __import__(f"berth._cli.{self.lazy[cmd_name][0]}")  # registers its commands on this group
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands section of the help, as click writes it, from the table (nothing imported)."""
        if not self.lazy:
            return super().format_commands(ctx, formatter)
        limit = formatter.width - 6 - max(map(len, self.lazy))
        rows = [  # each line shortened as click shortens a loaded command's help
            (name, click.Command(name, help=self.lazy[name][1]).get_short_help_str(limit)) for name in sorted(self.lazy)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; exits with a code of docs/cli.md's table unless `standalone_mode=False`."""
        settings = extra.pop("obj", None) or Settings()
        OpenArray.open = False
        argv = list(sys.argv[1:] if args is None else args)
        # asked for JSON: every outcome is a JSON document on stdout, a failure too (see _run)
        settings.json_out = bool({"--json", "--jsonl"} & set(argv[: argv.index("--") if "--" in argv else None]))
        # The help's width, as click works it out, but without its `import shutil` (and bz2, lzma).
        extra.setdefault("terminal_width", max(min(terminal_columns(), CONTEXT["max_content_width"]) - 2, 50))
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            code = _run(
                settings,
                lambda: super(Group, self).main(
                    args, prog_name or "berth", complete_var, standalone_mode=False, obj=settings, **extra
                ),
            )
        settings.close()
        if not standalone_mode:
            return code
        sys.exit(code)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a closed pipe comes out as `PipeClosed` (click would make it exit 1).

        The library's log warnings reach stderr while a command runs (never needed for `--help`,
        which ends before this: its logging stays unimported).
        """
        try:
            if ctx.parent is not None:  # a subgroup (`keys`): the top group already did
                return super().invoke(ctx)
            with log_to_stderr():
                return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise PipeClosed from exc

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Remember the command path for error messages; suggest the nearest command for a mistyped one."""
        try:
            name, cmd, rest = super().resolve_command(ctx, args)
        except click.UsageError:
            typed = click.utils.make_str(args[0]) if args else ""
            if typed.startswith("-") or self.get_command(ctx, typed) is not None:
                raise
            import difflib  # only on this error path

            near = difflib.get_close_matches(typed, self.list_commands(ctx), n=1, cutoff=0.6)
            if not near:
                raise
            raise click.UsageError(
                f"No such command {typed!r}: did you mean `{ctx.command_path} {near[0]}`?", ctx
            ) from None
        if cmd is not None:
            ctx.ensure_object(Settings).command = f"{ctx.command_path} {cmd.name}"
        return name, cmd, rest


def _debug() -> bool:
    return os.environ.get("BERTH_DEBUG", "") not in ("", "0")


def _run(settings: Settings, fn: Callable[[], Any]) -> int:
    def fail(message: str, code: int, *, reported: bool = False, details: dict[str, Any] | None = None) -> int:
        if _debug():
            import traceback

            traceback.print_exc()
        line = one_line(message)
        click.echo(f"{settings.command}: {line}", err=True)
        if (settings.json_out and not reported) or OpenArray.open:
            _json_failure(settings, line, code, details or {})
        return code

    try:
        rv = fn()
    except Failure as exc:
        return fail(str(exc), exc.code, reported=exc.reported, details=exc.details)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `berth` or `berth keys`: the help, as usual
        click.echo(exc.format_message())
        return USAGE
    except click.UsageError as exc:
        path = exc.ctx.command_path if exc.ctx is not None else "berth"
        settings.command = path
        return fail(f"{exc.format_message()} (see `{path} --help`)", USAGE)
    except click.ClickException as exc:
        return fail(exc.format_message(), USAGE)
    except click.Abort:
        return fail("aborted", INTERRUPTED)
    except (berth.InvalidKey, berth.InvalidEnvelope, berth.InvalidAnswer) as exc:
        return fail(_named(settings, exc), USAGE)
    except StoreMissing as exc:  # found at first use (PostgreSQL looks for its table then, not at open)
        return fail(_named(settings, exc), NOT_FOUND)
    except berth.BerthError as exc:
        return fail(_named(settings, exc), UNAVAILABLE if unreachable(exc) else REFUSED)
    except (BrokenPipeError, PipeClosed):
        # The reader went away (`berth ls | head -1`): end quietly, with the status of a program that
        # SIGPIPE ended, and point stdout at /dev/null so the final flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return PIPE_CLOSED
    except Exception as exc:
        if unreachable(exc):
            return fail(f"{where(settings.who)}: the backend is unreachable: {type(exc).__name__}: {exc}", UNAVAILABLE)
        return fail(
            f"internal error: {type(exc).__name__}: {exc} ({where(settings.who)}; BERTH_DEBUG=1 shows the traceback)",
            REFUSED,
        )
    return rv if isinstance(rv, int) else OK


_OUTCOMES = {
    REFUSED: "refused",
    USAGE: "usage",
    NOT_FOUND: "not_found",
    UNAVAILABLE: "unavailable",
    INTERRUPTED: "aborted",
}


def _json_failure(settings: Settings, message: str, code: int, details: dict[str, Any]) -> None:
    """The failure as one JSON object on stdout, for a command run with `--json` or `--jsonl`.

    stdout may already hold part of a streamed document. `ls --json` failing midway left its array
    open (`OpenArray`): the object is its last element and closes it, so stdout is one valid JSON
    document. Otherwise the object starts on a line of its own, so a reader of `--jsonl` still gets
    whole lines (the last one the failure).
    """
    import json

    doc = {
        "ok": False,
        "error": _OUTCOMES.get(code, "failed"),
        "exit_code": code,
        "message": message,
        "command": settings.command,
        "identity": settings.who,
        "key": settings.key,
        **details,
    }
    if OpenArray.open:
        OpenArray.open = False
        click.echo("  " + json.dumps(doc, indent=2).replace("\n", "\n  ") + "\n]")
        return
    click.echo(json.dumps(doc))


def _named(settings: Settings, exc: berth.BerthError) -> str:
    """The error's message, led by the identity and key when it does not name them itself."""
    text = str(exc)
    key = exc.key or settings.key
    if "identity" in text and (key is None or f"key {key!r}" in text):
        return text
    return f"{where(exc.identity or settings.who, key)}: {text}"


CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(
    cls=Group,
    lazy=COMMANDS,
    context_settings=CONTEXT,
    epilog=(
        "Sealing: BERTH_KEYRING=PATH (a keyring from `berth keys generate`) or BERTH_KMS=URL "
        "(gcpkms://..., awskms://..., local:///path); with neither, plaintext (development only). "
        "Run `berth demo` first: it shows the whole job in a few seconds."
    ),
)
@click.version_option(berth.__version__, "-V", "--version", prog_name="berth", message="%(prog)s %(version)s")
@store_options(env=True)
def cli() -> None:
    """Park sealed agent runs while they wait for a human; wake each exactly once.

    \b
    Example:
      berth demo
      BERTH_KEYRING=keys.json berth ls --prefix org/repo
    """


def main() -> None:
    """Entry point of the `berth` console script."""
    cli(prog_name="berth")
