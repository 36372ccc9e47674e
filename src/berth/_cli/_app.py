"""The `berth` group: shared options, and the one place that owns every error and exit code."""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

import berth
from berth._cli._failures import (
    OK,
    PIPE_CLOSED,
    REFUSED,
    USAGE,
    Failure,
    PipeClosed,
    log_to_stderr,
    one_line,
    show_warning,
    where,
)
from berth._cli._output import terminal_columns
from berth._cli._settings import Settings

__all__ = ["CONTEXT", "Group", "cli", "main", "output_options", "store_options"]

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
    """The `berth` group: owns every error and exit code, so no traceback reaches a user."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; exits with 0, 1 or 2 unless `standalone_mode=False`."""
        settings = extra.pop("obj", None) or Settings()
        # The help's width, as click works it out, but without its `import shutil` (and bz2, lzma).
        extra.setdefault("terminal_width", max(min(terminal_columns(), CONTEXT["max_content_width"]) - 2, 50))
        with warnings.catch_warnings(), log_to_stderr():
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
        """Run the command; a closed pipe comes out as `PipeClosed` (click would make it exit 1)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise PipeClosed from exc

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Remember the command path for error messages."""
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            ctx.ensure_object(Settings).command = f"{ctx.command_path} {cmd.name}"
        return name, cmd, rest


def _debug() -> bool:
    return os.environ.get("BERTH_DEBUG", "") not in ("", "0")


def _run(settings: Settings, fn: Callable[[], Any]) -> int:
    def fail(message: str, code: int) -> int:
        if _debug():
            traceback.print_exc()
        click.echo(f"{settings.command}: {one_line(message)}", err=True)
        return code

    try:
        rv = fn()
    except Failure as exc:
        return fail(str(exc), exc.code)
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
        return fail("aborted", 130)
    except (berth.InvalidKey, berth.InvalidEnvelope) as exc:
        return fail(_named(settings, exc), USAGE)
    except berth.BerthError as exc:
        return fail(_named(settings, exc), REFUSED)
    except (BrokenPipeError, PipeClosed):
        # The reader went away (`berth ls | head -1`): end quietly, with the status of a program that
        # SIGPIPE ended, and point stdout at /dev/null so the final flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return PIPE_CLOSED
    except Exception as exc:
        return fail(
            f"internal error: {type(exc).__name__}: {exc} ({where(settings.who)}; BERTH_DEBUG=1 shows the traceback)",
            REFUSED,
        )
    return rv if isinstance(rv, int) else OK


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
